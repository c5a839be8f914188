//! The text printer: a readable listing of a kernel for `explain()` and snapshot tests.

use crate::ir::*;
use std::fmt::Write;

/// Prints a kernel, its shared arrays and device functions as text, one line per statement.
pub fn print_kernel(k: &Kernel) -> String {
    let mut out = String::new();
    for (i, f) in k.functions.iter().enumerate() {
        let params: Vec<String> = f.params.iter().map(param).collect();
        let result = f
            .result
            .as_ref()
            .map(|t| format!(" -> {t}"))
            .unwrap_or_default();
        let inline = if f.noinline { "#[noinline] " } else { "" };
        let _ = writeln!(
            out,
            "{inline}fn {}(#{i}) ({}){result} {{",
            f.name,
            params.join(", ")
        );
        print_body(&mut out, &f.body, k);
        out.push_str("}\n");
    }
    for (i, n) in k.natives.iter().enumerate() {
        print_native(&mut out, i, n);
    }
    if !k.options.is_default() {
        let _ = writeln!(out, "#[options({})]", k.options);
    }
    let params: Vec<String> = k.params.iter().map(param).collect();
    let _ = writeln!(out, "kernel {}({}) {{", k.name, params.join(", "));
    for s in &k.shared {
        let len = match s.len {
            SharedLen::Static(n) => n.to_string(),
            SharedLen::Dynamic => "dynamic".into(),
        };
        let _ = writeln!(out, "  shared {}: [{}; {len}]", s.name, s.elem);
    }
    print_body(&mut out, &k.body, k);
    out.push_str("}\n");
    out
}

/// `intrinsic #i name(params) -> result`, then each binding and the source it includes.
fn print_native(out: &mut String, i: usize, n: &crate::native::Native) {
    let params: Vec<String> = n.params.iter().map(param).collect();
    let result = n
        .result
        .as_ref()
        .map(|t| format!(" -> {t}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "intrinsic #{i} {}({}){result}",
        n.name,
        params.join(", ")
    );
    for (target, code) in n.bindings() {
        let _ = writeln!(out, "  {} = {}", target.name(), code.name);
        for line in code.source.iter().flat_map(|s| s.lines()) {
            let _ = writeln!(out, "  | {line}");
        }
    }
}

fn param(p: &Param) -> String {
    match &p.kind {
        ParamKind::Buffer { elem, access } => {
            let a = match access {
                Access::Read => "read",
                Access::Write => "write",
                Access::ReadWrite => "read_write",
            };
            format!("{}: buffer<{elem}, {a}>", p.name)
        }
        ParamKind::Value(t) => format!("{}: {t}", p.name),
    }
}

fn print_body(out: &mut String, body: &Body, k: &Kernel) {
    for l in &body.locals {
        let _ = writeln!(out, "  var {}: {}", l.name, l.ty);
    }
    block(out, &body.block, body, k, 1);
}

fn mem(m: &Memory, k: &Kernel) -> String {
    match m {
        Memory::Buffer(i) => k
            .params
            .get(*i as usize)
            .map(|p| p.name.clone())
            .unwrap_or_else(|| format!("param{i}")),
        Memory::Shared(i) => k
            .shared
            .get(*i as usize)
            .map(|s| s.name.clone())
            .unwrap_or_else(|| format!("shared{i}")),
    }
}

fn h(x: &Handle) -> String {
    format!("%{}", x.0)
}

fn local(l: &LocalId, body: &Body) -> String {
    body.locals
        .get(l.0 as usize)
        .map(|d| d.name.clone())
        .unwrap_or_else(|| format!("local{}", l.0))
}

fn expr(e: &Expr, body: &Body, k: &Kernel) -> String {
    let list = |v: &[Handle]| v.iter().map(h).collect::<Vec<_>>().join(", ");
    match e {
        Expr::Literal(v) => v.to_string(),
        Expr::Param(i) => format!("param {i}"),
        Expr::LocalGet(l) => local(l, body),
        Expr::LocalIndex { local: l, index } => format!("{}[{}]", local(l, body), h(index)),
        Expr::Load { memory, index } => format!("load {}[{}]", mem(memory, k), h(index)),
        Expr::Len(m) => format!("len({})", mem(m, k)),
        Expr::Binary { op, lhs, rhs } => format!("{} {} {}", h(lhs), op.symbol(), h(rhs)),
        Expr::Unary {
            op: UnaryOp::Neg,
            arg,
        } => format!("-{}", h(arg)),
        Expr::Unary {
            op: UnaryOp::Not,
            arg,
        } => format!("!{}", h(arg)),
        Expr::Select {
            cond,
            accept,
            reject,
        } => format!("select({}, {}, {})", h(cond), h(accept), h(reject)),
        Expr::Cast { arg, to } => format!("{} as {to}", h(arg)),
        Expr::Bitcast { arg, to } => format!("bitcast<{to}>({})", h(arg)),
        Expr::Math { fun, args } => format!("{}({})", fun.name(), list(args)),
        Expr::Builtin(b) => builtin_name(b),
        Expr::Compose { ty, parts } => format!("{ty}({})", list(parts)),
        Expr::Extract { base, index } => format!("{}.{index}", h(base)),
        Expr::Atomic {
            memory,
            index,
            op,
            value,
            compare,
        } => {
            let c = compare.map(|c| format!(", {}", h(&c))).unwrap_or_default();
            format!(
                "atomic_{op:?}({}[{}]{c}, {})",
                mem(memory, k),
                h(index),
                h(value)
            )
            .to_lowercase()
        }
        Expr::Subgroup { op, arg, lane } => {
            let l = lane.map(|l| format!(", {}", h(&l))).unwrap_or_default();
            format!("subgroup_{op:?}({}{l})", h(arg)).to_lowercase()
        }
        Expr::Call { function, args } => {
            let name = k
                .functions
                .get(function.0 as usize)
                .map(|f| f.name.as_str())
                .unwrap_or("?");
            format!("call {name}({})", list(args))
        }
    }
}

fn block(out: &mut String, b: &Block, body: &Body, k: &Kernel, depth: usize) {
    let pad = "  ".repeat(depth);
    for s in &b.0 {
        match s {
            Stmt::Source(at) => {
                let _ = writeln!(out, "{pad}// {at}");
            }
            Stmt::Eval(x) => {
                let text = body
                    .exprs
                    .get(x.index())
                    .map(|e| expr(e, body, k))
                    .unwrap_or_else(|| "?".into());
                let _ = writeln!(out, "{pad}{} = {text}", h(x));
            }
            Stmt::LocalSet { local: l, value } => {
                let _ = writeln!(out, "{pad}{} = {}", local(l, body), h(value));
            }
            Stmt::LocalIndexSet {
                local: l,
                index,
                value,
            } => {
                let _ = writeln!(out, "{pad}{}[{}] = {}", local(l, body), h(index), h(value));
            }
            Stmt::Store {
                memory,
                index,
                value,
            } => {
                let _ = writeln!(
                    out,
                    "{pad}store {}[{}] = {}",
                    mem(memory, k),
                    h(index),
                    h(value)
                );
            }
            Stmt::If {
                cond,
                accept,
                reject,
            } => {
                let _ = writeln!(out, "{pad}if {} {{", h(cond));
                block(out, accept, body, k, depth + 1);
                if !reject.0.is_empty() {
                    let _ = writeln!(out, "{pad}}} else {{");
                    block(out, reject, body, k, depth + 1);
                }
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::Loop {
                body: lb,
                continuing,
            } => {
                let _ = writeln!(out, "{pad}loop {{");
                block(out, lb, body, k, depth + 1);
                if !continuing.0.is_empty() {
                    let _ = writeln!(out, "{pad}}} continuing {{");
                    block(out, continuing, body, k, depth + 1);
                }
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::Break => {
                let _ = writeln!(out, "{pad}break");
            }
            Stmt::Continue => {
                let _ = writeln!(out, "{pad}continue");
            }
            Stmt::Return(v) => {
                let _ = writeln!(
                    out,
                    "{pad}return{}",
                    v.map(|v| format!(" {}", h(&v))).unwrap_or_default()
                );
            }
            Stmt::Barrier(BarrierScope::Group) => {
                let _ = writeln!(out, "{pad}barrier");
            }
            Stmt::Barrier(BarrierScope::Subgroup) => {
                let _ = writeln!(out, "{pad}subgroup_barrier");
            }
            Stmt::Native(call) => {
                let args: Vec<String> = call
                    .args
                    .iter()
                    .map(|a| match a {
                        crate::native::NativeArg::Value(v) => h(v),
                        crate::native::NativeArg::Memory(m) => mem(m, k),
                    })
                    .collect();
                let name = k
                    .natives
                    .get(call.native.0 as usize)
                    .map(|n| n.name.as_str())
                    .unwrap_or("?");
                let to = call
                    .result
                    .map(|l| format!("{} = ", local(&l, body)))
                    .unwrap_or_default();
                let _ = writeln!(out, "{pad}{to}native {name}({}) else {{", args.join(", "));
                block(out, &call.fallback, body, k, depth + 1);
                let _ = writeln!(out, "{pad}}}");
            }
        }
    }
}

fn builtin_name(b: &Builtin) -> String {
    let axis = |name: &str, a: &Axis| format!("{name}.{}", a.name());
    match b {
        Builtin::GlobalId(a) => axis("global_id", a),
        Builtin::LocalId(a) => axis("local_id", a),
        Builtin::GroupId(a) => axis("group_id", a),
        Builtin::GroupSize(a) => axis("group_size", a),
        Builtin::NumGroups(a) => axis("num_groups", a),
        Builtin::GlobalSize(a) => axis("global_size", a),
        Builtin::LocalIndex => "local_index".into(),
        Builtin::SubgroupSize => "subgroup_size".into(),
        Builtin::SubgroupId => "subgroup_id".into(),
        Builtin::SubgroupLane => "subgroup_lane".into(),
    }
}
