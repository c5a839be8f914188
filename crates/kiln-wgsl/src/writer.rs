//! The writer proper: the shader's bindings and entry point, device functions, locals and
//! statements (loops counted against a device's loop limit where it has one).

use crate::*;
use std::fmt::Write as _;

/// The loops in `b`, nested ones included.
pub(crate) fn count_loops(b: &Block) -> u32 {
    b.count(&|s| matches!(s, Stmt::Loop { .. })) as u32
}

/// True when `s` may leave the block it is in: a `break`, `continue` or `return` that does not
/// belong to a loop nested in it.
pub(crate) fn leaves_block(s: &Stmt) -> bool {
    s.any_outside_loops(&|s| matches!(s, Stmt::Break | Stmt::Continue | Stmt::Return(_)))
}

impl Writer {
    pub(crate) fn kernel(mut self, k: &Kernel, info: &KernelInfo) -> W<Shader> {
        let atomic_mems: HashSet<Memory> = k
            .body
            .exprs
            .iter()
            .filter_map(|e| match e {
                Expr::Atomic { memory, .. } => Some(*memory),
                _ => None,
            })
            .collect();

        let mut decls = String::new();
        let mut prologue = String::new();
        let mut params = Vec::new();
        let mut word = 3u32;
        let mut binding = 1u32;
        for (pi, p) in k.params.iter().enumerate() {
            match &p.kind {
                ParamKind::Buffer { elem, access } => {
                    let atomic = atomic_mems.contains(&Memory::Buffer(pi as u32));
                    let storage = match elem.as_scalar() {
                        Some(s) if atomic && s.bits() == 64 => {
                            return err(format!(
                                "64-bit atomics (buffer `{}` of {s}) in WGSL",
                                p.name
                            ))
                        }
                        Some(s @ (ScalarType::I32 | ScalarType::U32 | ScalarType::F32))
                            if atomic =>
                        {
                            Storage::Atomic(s)
                        }
                        Some(
                            s @ (ScalarType::I32
                            | ScalarType::U32
                            | ScalarType::F32
                            | ScalarType::I64
                            | ScalarType::U64
                            | ScalarType::F64),
                        ) => Storage::Typed(s),
                        _ => {
                            if elem.flatten().iter().any(|(s, _)| s.bits() == 64) {
                                self.needs.int64 = true;
                            }
                            Storage::Words {
                                atomic: *access != Access::Read && !elem.size().is_multiple_of(4),
                            }
                        }
                    };
                    let array = match storage {
                        Storage::Typed(s) => format!("array<{}>", rt(s)),
                        Storage::Atomic(ScalarType::F32) => "array<atomic<u32>>".into(),
                        Storage::Atomic(s) => format!("array<atomic<{}>>", rt(s)),
                        Storage::Words { atomic: true } => "array<atomic<u32>>".into(),
                        _ => "array<u32>".into(),
                    };
                    let mode = if *access == Access::Read {
                        "read"
                    } else {
                        "read_write"
                    };
                    let _ = writeln!(
                        decls,
                        "@group(0) @binding({binding}) var<storage, {mode}> {}: {array};",
                        p.name
                    );
                    let _ = writeln!(prologue, "  let {}_len = kiln_args[{word}];", p.name);
                    params.push(ParamSlot::Buffer {
                        binding,
                        len_word: word,
                    });
                    self.mems.push(Some(MemInfo {
                        name: p.name.clone(),
                        elem: elem.clone(),
                        storage,
                        len: format!("{}_len", p.name),
                    }));
                    binding += 1;
                    word += 1;
                }
                ParamKind::Value(t) => {
                    params.push(ParamSlot::Value { first_word: word });
                    let flat = t.flatten();
                    for (c, (s, _)) in flat.iter().enumerate() {
                        let name = if flat.len() == 1 {
                            p.name.clone()
                        } else {
                            format!("{}_{c}", p.name)
                        };
                        let w0 = format!("kiln_args[{word}]");
                        let v = match s {
                            ScalarType::Bool => format!("({w0} != 0u)"),
                            ScalarType::U8 | ScalarType::U16 | ScalarType::U32 => w0,
                            ScalarType::I8 | ScalarType::I16 | ScalarType::I32 => {
                                format!("bitcast<i32>({w0})")
                            }
                            ScalarType::F32 => format!("bitcast<f32>({w0})"),
                            ScalarType::F16 => self.h2f(&format!("({w0} & 0xffffu)")),
                            _ => {
                                let bits =
                                    format!("(u64({w0}) | (u64(kiln_args[{}]) << 32u))", word + 1);
                                word += 1;
                                match s {
                                    ScalarType::U64 => bits,
                                    ScalarType::I64 => format!("i64({bits})"),
                                    _ => format!("bitcast<f64>({bits})"),
                                }
                            }
                        };
                        word += 1;
                        let _ = writeln!(prologue, "  let {name}: {} = {v};", rt(*s));
                    }
                    self.mems.push(None);
                }
            }
        }
        self.shared_base = self.mems.len();
        let mut shared_overrides = Vec::new();
        for (si, s) in k.shared.iter().enumerate() {
            let atomic = atomic_mems.contains(&Memory::Shared(si as u32));
            let len = match s.len {
                SharedLen::Static(n) => format!("{}u", n.max(1)),
                SharedLen::Dynamic => {
                    let o = format!("kiln_shared_len_{si}");
                    let _ = writeln!(decls, "override {o}: u32 = 1u;");
                    shared_overrides.push(o.clone());
                    o
                }
            };
            let flat = s.elem.flatten();
            for (c, (sc, _)) in flat.iter().enumerate() {
                if atomic && sc.bits() == 64 {
                    return err(format!(
                        "64-bit atomics (shared array `{}` of {sc}) in WGSL",
                        s.name
                    ));
                }
                let t = match (*sc, atomic) {
                    (ScalarType::Bool, _) => "u32".to_string(),
                    (ScalarType::F32, true) => "atomic<u32>".into(),
                    (other, true) => format!("atomic<{}>", rt(other)),
                    (other, false) => rt(other).into(),
                };
                let _ = writeln!(
                    decls,
                    "var<workgroup> {}: array<{t}, {len}>;",
                    component_name(&s.name, c, flat.len())
                );
            }
            self.mems.push(Some(MemInfo {
                name: s.name.clone(),
                elem: s.elem.clone(),
                storage: if atomic {
                    Storage::Atomic(s.elem.as_scalar().unwrap_or(ScalarType::U32))
                } else {
                    Storage::Shared
                },
                len: match s.len {
                    SharedLen::Static(n) => format!("{n}u"),
                    SharedLen::Dynamic => len,
                },
            }));
        }

        let mut functions = String::new();
        for fi in 0..k.functions.len() {
            self.function(DeviceFunction::of(k, fi, info)?, &mut functions)?;
        }
        let cx = Cx::of_kernel(k, info);
        let mut inner = String::new();
        self.locals(&cx, &mut inner)?;
        self.block(&cx, &k.body.block, &mut inner, 1)?;

        let mut out = format!("// generated by kiln from kernel `{}`\n", k.name);
        for (name, default) in GROUP_SIZE_OVERRIDES.iter().zip([64, 1, 1]) {
            let _ = writeln!(out, "override {name}: u32 = {default}u;");
        }
        out += "@group(0) @binding(0) var<storage, read> kiln_args: array<u32>;\n";
        out += &decls;
        let fault_binding = self.options.loop_budget.map(|budget| {
            let limit = budget.limit;
            let _ = write!(
                out,
                "override {FAULT_TAG_OVERRIDE}: u32 = 1u;\n\
                 @group(0) @binding({binding}) var<storage, read_write> kiln_fault: array<atomic<u32>>;\n"
            );
            if let Some(size) = budget.subgroup_size {
                let last = LOOP_COUNT_SUBGROUPS - 1;
                let _ = write!(
                    out,
                    "var<workgroup> kiln_trips: array<atomic<u32>, {LOOP_COUNT_SUBGROUPS}>;\n\
                     // Counts a loop pass of this subgroup (its first active work item counts); at {limit}, the adapter may stop its loops.\n\
                     fn kiln_trips_add(n: u32) {{ if (subgroupBroadcastFirst(kiln_lindex) == kiln_lindex) {{ if (atomicAdd(&kiln_trips[min(kiln_lindex / {size}u, {last}u)], n) + n >= {limit}u) {{ atomicMax(&kiln_fault[0], {FAULT_TAG_OVERRIDE}); }} }} }}\n\
                     fn kiln_trip() {{ kiln_trips_add(1u); }}\n\
                     // After an if with loops: llvmpipe ran the loops of a branch that no work item took once each.\n\
                     fn kiln_untaken(took: bool, then_loops: u32, else_loops: u32) {{ kiln_trips_add(select(0u, then_loops, !subgroupAny(took)) + select(0u, else_loops, subgroupAll(took))); }}\n"
                );
            } else {
                let _ = write!(
                    out,
                    "var<private> kiln_trips: u32;\n\
                     // Counts loop passes of this work item; at {limit}, the adapter may stop its loops.\n\
                     fn kiln_trips_add(n: u32) {{ kiln_trips = kiln_trips + n; if (kiln_trips >= {limit}u) {{ atomicMax(&kiln_fault[0], {FAULT_TAG_OVERRIDE}); }} }}\n\
                     fn kiln_trip() {{ kiln_trips_add(1u); }}\n\
                     // After an if with loops: llvmpipe runs the loops of a branch that no work item of the batch took once each; count those of the branch this one did not take.\n\
                     fn kiln_untaken(took: bool, then_loops: u32, else_loops: u32) {{ kiln_trips_add(select(then_loops, else_loops, took)); }}\n"
                );
            }
            binding
        });
        out += "var<private> kiln_lid: vec3<u32>;\nvar<private> kiln_gid: vec3<u32>;\nvar<private> kiln_groups: vec3<u32>;\nvar<private> kiln_lindex: u32;\n";
        let subgroup_params = if self.needs.subgroups {
            out += "var<private> kiln_sg_size: u32;\nvar<private> kiln_sg_lane: u32;\nvar<private> kiln_sg_id: u32;\n";
            ", @builtin(subgroup_size) kiln_subgroup_size: u32, @builtin(subgroup_invocation_id) kiln_subgroup_lane: u32, @builtin(subgroup_id) kiln_subgroup_id: u32"
        } else {
            ""
        };
        for h in self.helpers.texts() {
            out += h;
            out.push('\n');
        }
        out += &self.native_prelude(k);
        out += &functions;
        let _ = writeln!(
            out,
            "@compute @workgroup_size({}, {}, {})",
            GROUP_SIZE_OVERRIDES[0], GROUP_SIZE_OVERRIDES[1], GROUP_SIZE_OVERRIDES[2]
        );
        let _ = writeln!(out, "fn {}(@builtin(local_invocation_id) kiln_local_id: vec3<u32>, @builtin(local_invocation_index) kiln_local_index: u32, @builtin(workgroup_id) kiln_workgroup: vec3<u32>, @builtin(num_workgroups) kiln_workgroups: vec3<u32>{subgroup_params}) {{", k.name);
        out += "  kiln_groups = vec3<u32>(kiln_args[0], kiln_args[1], kiln_args[2]);\n";
        out += "  let kiln_linear = kiln_workgroup.x + kiln_workgroups.x * (kiln_workgroup.y + kiln_workgroups.y * kiln_workgroup.z);\n";
        out += "  if (kiln_linear >= kiln_groups.x * kiln_groups.y * kiln_groups.z) { return; }\n";
        out += "  if (kiln_groups.y == 1u && kiln_groups.z == 1u) { kiln_gid = vec3<u32>(kiln_linear, 0u, 0u); } else { kiln_gid = vec3<u32>(kiln_linear % kiln_groups.x, (kiln_linear / kiln_groups.x) % kiln_groups.y, kiln_linear / (kiln_groups.x * kiln_groups.y)); }\n";
        out += "  kiln_lid = kiln_local_id;\n  kiln_lindex = kiln_local_index;\n";
        if self.needs.subgroups {
            out += "  kiln_sg_size = kiln_subgroup_size;\n  kiln_sg_lane = kiln_subgroup_lane;\n  kiln_sg_id = kiln_subgroup_id;\n";
        }
        if let Some(size) = self.options.loop_budget.and_then(|b| b.subgroup_size) {
            if self.counts_trips.get() {
                // Shared memory starts unspecified: each subgroup's first work item zeroes its
                // count before the subgroup's loops (llvmpipe runs a subgroup as one batch, in
                // order). Groups of more subgroups than counts share the last count, so there
                // every count is zeroed before any work item goes on.
                let last = LOOP_COUNT_SUBGROUPS - 1;
                let _ = writeln!(
                    out,
                    "  if (kiln_lindex % {size}u == 0u && kiln_lindex / {size}u <= {last}u) {{ atomicStore(&kiln_trips[kiln_lindex / {size}u], 0u); }}\n  \
                     if ({} * {} * {} > {}u) {{ workgroupBarrier(); }}",
                    GROUP_SIZE_OVERRIDES[0],
                    GROUP_SIZE_OVERRIDES[1],
                    GROUP_SIZE_OVERRIDES[2],
                    LOOP_COUNT_SUBGROUPS * size
                );
            }
        }
        out += &prologue;
        out += &inner;
        out += "}\n";
        Ok(Shader {
            text: out,
            entry: k.name.clone(),
            needs: self.needs,
            params,
            args_words: word,
            shared_overrides,
            fault_binding,
        })
    }

    pub(crate) fn locals(&mut self, cx: &Cx, out: &mut String) -> W<()> {
        for (i, l) in cx.body.locals.iter().enumerate() {
            let name = cx.local_name(i);
            match &l.ty {
                Type::Array(e, n) => {
                    let flat = e.flatten();
                    for (c, (s, _)) in flat.iter().enumerate() {
                        let _ = writeln!(
                            out,
                            "  var {}: array<{}, {}>;",
                            component_name(&name, c, flat.len()),
                            rt(*s),
                            (*n).max(1)
                        );
                    }
                }
                t => {
                    let flat = t.flatten();
                    for (c, (s, _)) in flat.iter().enumerate() {
                        let _ = writeln!(
                            out,
                            "  var {}: {} = {};",
                            component_name(&name, c, flat.len()),
                            rt(*s),
                            zero(*s)
                        );
                    }
                }
            }
        }
        Ok(())
    }

    pub(crate) fn function(&mut self, d: DeviceFunction, out: &mut String) -> W<()> {
        let (fi, f, cx, result) = (d.index, d.function, d.cx, d.result);
        let flat = result.flatten();
        let ret_ty = if flat.len() == 1 {
            rt(flat[0].0).to_string()
        } else {
            let name = format!("kiln_ret_{}", f.name);
            let fields: Vec<String> = flat
                .iter()
                .enumerate()
                .map(|(i, (s, _))| format!("c{i}: {}", rt(*s)))
                .collect();
            let _ = writeln!(out, "struct {name} {{ {} }}", fields.join(", "));
            name
        };
        let mut params = Vec::new();
        for p in &f.params {
            let ParamKind::Value(t) = &p.kind else {
                return err("device functions take values only");
            };
            let flat = t.flatten();
            for (c, (s, _)) in flat.iter().enumerate() {
                params.push(format!(
                    "{}: {}",
                    component_name(&p.name, c, flat.len()),
                    rt(*s)
                ));
            }
        }
        let inline = if f.noinline { "noinline" } else { "inline" };
        let _ = writeln!(
            out,
            "// device function #{fi} ({inline})\nfn {}({}) -> {ret_ty} {{",
            f.name,
            params.join(", ")
        );
        self.locals(&cx, out)?;
        if block_has_loop(&f.body.block) {
            // llvmpipe counts a pass more per call of a function with loops than the loops'
            // own passes (measured with `%` of f32 in a loop).
            let _ = writeln!(out, "  {}", self.trip().trim_end());
        }
        self.block(&cx, &f.body.block, out, 1)?;
        let zeros: Vec<String> = flat.iter().map(|(s, _)| zero(*s)).collect();
        if flat.len() == 1 {
            let _ = writeln!(out, "  return {};", zeros[0]);
        } else {
            let _ = writeln!(out, "  return {ret_ty}({});", zeros.join(", "));
        }
        out.push_str("}\n");
        Ok(())
    }

    pub(crate) fn block(&mut self, cx: &Cx, b: &Block, out: &mut String, depth: usize) -> W<()> {
        for s in &b.0 {
            self.stmt(cx, s, out, depth)?;
        }
        Ok(())
    }

    pub(crate) fn stmt(&mut self, cx: &Cx, s: &Stmt, out: &mut String, depth: usize) -> W<()> {
        let pad = "  ".repeat(depth);
        match s {
            Stmt::Source(at) => {
                let _ = writeln!(out, "{pad}// {at}");
            }
            Stmt::Eval(h) => {
                let ty = cx.ty(*h)?;
                let vals = components(self, cx, *h)?;
                let flat = ty.flatten();
                let mut line = vals.pre.join(" ");
                if let Some(StructCall { call, .. }) = vals.call {
                    let _ = write!(line, "let t{}_r = {call};", h.0);
                    for (c, (sc, _)) in flat.iter().enumerate() {
                        let _ = write!(
                            line,
                            " let {}: {} = t{}_r.c{c};",
                            temp_name(*h, c, &ty),
                            rt(*sc),
                            h.0
                        );
                    }
                } else {
                    // Literals are held in `var`s: naga folds constant `let`s, and its folder
                    // rejects some casts and divisions that are well defined at run time.
                    let binder = if matches!(cx.body.exprs[h.index()], Expr::Literal(_)) {
                        "var"
                    } else {
                        "let"
                    };
                    for (c, ((sc, _), v)) in flat.iter().zip(&vals.comps).enumerate() {
                        if !line.is_empty() {
                            line.push(' ');
                        }
                        let _ = write!(
                            line,
                            "{binder} {}: {} = {v};",
                            temp_name(*h, c, &ty),
                            rt(*sc)
                        );
                    }
                }
                let _ = writeln!(out, "{pad}{line}");
            }
            Stmt::Store {
                memory,
                index,
                value,
            } => {
                let i = temp_name(*index, 0, &Type::Scalar(ScalarType::U32));
                let m = self.mem(*memory)?;
                let elem = m.elem.clone();
                let vals: Vec<String> = (0..elem.flatten().len())
                    .map(|c| temp_name(*value, c, &elem))
                    .collect();
                let body = self.store(*memory, &i, &vals)?;
                let m = self.mem(*memory)?;
                if cx.in_bounds.store(*memory, *index, *value) {
                    let _ = writeln!(out, "{pad}{body}");
                } else {
                    let _ = writeln!(out, "{pad}if ({i} < {}) {{ {body} }}", m.len);
                }
            }
            Stmt::If {
                cond,
                accept,
                reject,
            } => {
                let c = temp_name(*cond, 0, &Type::Scalar(ScalarType::Bool));
                let _ = writeln!(out, "{pad}if ({c}) {{");
                self.block(cx, accept, out, depth + 1)?;
                if !reject.0.is_empty() {
                    let _ = writeln!(out, "{pad}}} else {{");
                    self.block(cx, reject, out, depth + 1)?;
                }
                let _ = writeln!(out, "{pad}}}");
                let loops = [count_loops(accept), count_loops(reject)];
                if self.options.loop_budget.is_some() && loops != [0, 0] {
                    let [then_loops, else_loops] = loops;
                    let _ = writeln!(out, "{pad}kiln_untaken({c}, {then_loops}u, {else_loops}u);");
                }
            }
            Stmt::Loop { body, continuing } => {
                let _ = writeln!(out, "{pad}loop {{");
                if self.options.loop_budget.is_some() {
                    let _ = writeln!(out, "{pad}  {}", self.trip().trim_end());
                }
                self.block(cx, body, out, depth + 1)?;
                if !continuing.0.is_empty() {
                    if continuing.0.iter().any(leaves_block) {
                        return err("break, continue or return in a loop's continuing block");
                    }
                    let _ = writeln!(out, "{pad}  continuing {{");
                    self.block(cx, continuing, out, depth + 2)?;
                    let _ = writeln!(out, "{pad}  }}");
                }
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::Return(_)
            | Stmt::Break
            | Stmt::Continue
            | Stmt::LocalSet { .. }
            | Stmt::LocalIndexSet { .. } => {
                let line = common_line(cx, s, |function, parts| {
                    format!("return kiln_ret_{function}({parts});")
                })?;
                let _ = writeln!(out, "{pad}{line}");
            }
            Stmt::Barrier(BarrierScope::Group) => {
                let _ = writeln!(out, "{pad}storageBarrier(); workgroupBarrier();");
            }
            Stmt::Barrier(BarrierScope::Subgroup) if self.options.subgroups => {
                self.needs.subgroups = true;
                let _ = writeln!(out, "{pad}subgroupBarrier();");
            }
            Stmt::Barrier(BarrierScope::Subgroup) => {
                let _ = writeln!(out, "{pad}// subgroup barrier: subgroups have one lane");
            }
            Stmt::Native(call) => self.native_call(cx, call, out, depth)?,
        }
        Ok(())
    }
}
