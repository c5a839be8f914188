//! Memory: per-item private memory for locals that outlive a run, buffer and shared-array
//! element addresses, private arrays, and out-of-bounds redirection.

use super::*;

impl<'a, 'f> Lowerer<'a, 'f> {
    /// Barrier mode: lays out the per-item private frame (dead flag, then the locals and
    /// computed values that more than one run uses; see [`runs`]). The other locals are
    /// registers, zeroed at the start of each run's pass over a work item.
    pub(super) fn plan_private(&mut self, fx: &mut FnCtx) -> R<()> {
        let plan = runs::plan(fx.body);
        let mut off = 8u32;
        for ((l, private), group) in fx
            .body
            .locals
            .iter()
            .zip(&plan.private)
            .zip(&plan.group_local)
        {
            if matches!(l.ty, Type::Array(..)) {
                array_bytes(l)?;
            }
            if *group {
                // Zero at entry, like every local; only group-level code assigns it.
                let vars = self.declare_vars(&l.ty);
                self.zero_vars(&l.ty, &vars);
                fx.locals.push(LocalStore::Group(vars));
                continue;
            }
            if !private {
                let vars = self.declare_vars(&l.ty);
                fx.locals.push(LocalStore::Vars(vars));
                continue;
            }
            let a = l.ty.align().max(1);
            off = off.div_ceil(a) * a;
            fx.locals.push(LocalStore::Private(off));
            off = off
                .checked_add(l.ty.size())
                .ok_or("private memory overflow")?;
        }
        for (t, spill) in fx.types.iter().zip(&plan.spill) {
            if !spill {
                self.spill_off.push(None);
                continue;
            }
            off = off.div_ceil(8) * 8;
            self.spill_off.push(Some(off));
            off = off.checked_add(t.size()).ok_or("private memory overflow")?;
        }
        self.frame_bytes = off.div_ceil(16) * 16;
        self.hoisted = vec![false; fx.body.exprs.len()];
        self.runs = plan;
        Ok(())
    }

    /// The work item being lowered: inside a work-item loop its index, at group level 0 (the
    /// item that decides group-uniform control flow).
    pub(super) fn cur_item(&mut self) -> Value {
        match self.item {
            Some(v) => v,
            None => self.iconst32(0),
        }
    }

    /// The current work item's copy of the private value at frame offset `off`, `size` bytes
    /// long. Private memory is laid out value by value: the value at offset `off` of the
    /// per-item frame occupies bytes `off * total .. (off + size) * total`, one `size`-byte
    /// copy per work item in work-item order, so a quad's four copies are adjacent.
    pub(super) fn private_addr(&mut self, off: u32, size: u32) -> Value {
        let item = self.cur_item();
        let item64 = self.b.ins().uextend(types::I64, item);
        let at = self.b.ins().imul_imm_u(item64, size as i64);
        let region = self.b.ins().imul_imm_u(self.total64, off as i64);
        let base = self.b.ins().iadd(self.private, region);
        self.b.ins().iadd(base, at)
    }

    /// Loads a value of type `ty` from `addr + base_off`, one Cranelift value per component.
    /// Integers narrower than 64 bits are loaded extended (unsigned ones to 64 bits, signed
    /// 8- and 16-bit ones to 32) and reduced, so that a cast widening them, or an address
    /// computed from them, finds the extended value (see [`Self::loaded_wide`]).
    pub(super) fn load_flat(&mut self, ty: &Type, addr: Value, base_off: u32) -> Vec<Value> {
        ty.flatten()
            .into_iter()
            .map(|(s, off)| {
                let (f, off) = (mem_flags(), (base_off + off) as i32);
                if s == ScalarType::F16 {
                    let bits = self.b.ins().load(types::I16, f, addr, off);
                    return self.h2f(bits);
                }
                let ins = self.b.ins();
                let wide = match s {
                    ScalarType::U8 => ins.uload8(types::I64, f, addr, off),
                    ScalarType::I8 => ins.sload8(types::I32, f, addr, off),
                    ScalarType::U16 => ins.uload16(types::I64, f, addr, off),
                    ScalarType::I16 => ins.sload16(types::I32, f, addr, off),
                    ScalarType::U32 => ins.uload32(f, addr, off),
                    _ => return ins.load(clty(s), f, addr, off),
                };
                self.b.ins().ireduce(clty(s), wide)
            })
            .collect()
    }

    /// When `x` is an integer [`Self::load_flat`] loaded extended (or such a value reduced to
    /// 32 bits), the extended value: zero-extended to 64 bits when `signed` is false,
    /// sign-extended to 32 bits when true.
    pub(super) fn loaded_wide(&self, x: Value, signed: bool) -> Option<Value> {
        let dfg = &self.b.func.dfg;
        let ir::ValueDef::Result(reduce, 0) = dfg.value_def(x) else {
            return None;
        };
        let ir::InstructionData::Unary {
            opcode: ir::Opcode::Ireduce,
            arg,
        } = dfg.insts[reduce]
        else {
            return None;
        };
        let ir::ValueDef::Result(load, 0) = dfg.value_def(arg) else {
            return None;
        };
        let opcode = dfg.insts[load].opcode();
        let extends = if signed {
            matches!(opcode, ir::Opcode::Sload8 | ir::Opcode::Sload16)
        } else {
            matches!(
                opcode,
                ir::Opcode::Uload8 | ir::Opcode::Uload16 | ir::Opcode::Uload32
            )
        };
        extends.then_some(arg)
    }

    pub(super) fn store_flat(&mut self, ty: &Type, addr: Value, base_off: u32, vals: &[Value]) {
        for ((s, off), &v) in ty.flatten().into_iter().zip(vals) {
            let v = match s {
                ScalarType::F16 => self.f2h(v),
                _ => v,
            };
            self.b
                .ins()
                .store(mem_flags(), v, addr, (base_off + off) as i32);
        }
    }

    /// The base pointer, element count (64-bit) and element type of a buffer parameter or
    /// shared array.
    pub(super) fn memory(&self, m: Memory) -> R<(Value, Value, Type)> {
        Ok(match m {
            Memory::Buffer(p) => {
                let (base, len) = self
                    .bufs
                    .get(p as usize)
                    .copied()
                    .flatten()
                    .ok_or("not a buffer")?;
                let ParamKind::Buffer { elem, .. } = &self.k.params[p as usize].kind else {
                    return Err("not a buffer".into());
                };
                (base, len, elem.clone())
            }
            Memory::Shared(s) => {
                let (base, len) = *self.shared.get(s as usize).ok_or("no such shared array")?;
                (base, len, self.k.shared[s as usize].elem.clone())
            }
        })
    }

    /// The address `base + (index + step) * size` of an element, `index` 64-bit: the step
    /// becomes the access's displacement.
    pub(super) fn element_addr(
        &mut self,
        base: Value,
        index: Value,
        step: i64,
        size: u32,
    ) -> Value {
        let off = self.b.ins().imul_imm_u(index, size as i64);
        let addr = self.b.ins().iadd(base, off);
        match step {
            0 => addr,
            s => self.b.ins().iadd_imm_s(addr, s * size as i64),
        }
    }

    /// The address of element `index` of memory `m` and the element's type, for an access
    /// that the loop being lowered keeps in bounds: `(index, step)` from
    /// [`Self::proven_index`].
    pub(super) fn proven_elem(
        &mut self,
        m: Memory,
        (index, step): (Value, i64),
    ) -> R<(Value, Type)> {
        let (base, _, elem) = self.memory(m)?;
        let addr = self.element_addr(base, index, step, elem.size());
        Ok((addr, elem))
    }

    /// The address of element `i` of memory `m`, whether `i` is in bounds, and the element
    /// type. Out of bounds, the address is the zero page (`write` false) or the sink, tested
    /// as `check` says.
    pub(super) fn mem_elem(
        &mut self,
        m: Memory,
        i: Value,
        write: bool,
        check: BoundsCheck,
    ) -> R<(Value, Value, Type)> {
        let (base, len, elem) = self.memory(m)?;
        let i64v = self.index64(i);
        let addr = self.element_addr(base, i64v, 0, elem.size());
        if check == BoundsCheck::Proven {
            let yes = self.b.ins().iconst(types::I8, 1);
            return Ok((addr, yes, elem));
        }
        let inb = self.b.ins().icmp(IntCC::UnsignedLessThan, i64v, len);
        let addr = self.pick_address(inb, addr, write, check);
        Ok((addr, inb, elem))
    }

    /// The address of element `i` of array local `local` and the element's type. Out of
    /// bounds gives the address of zeros to read or of a sink to write, tested as `check`
    /// says.
    pub(super) fn array_elem(
        &mut self,
        fx: &FnCtx,
        local: LocalId,
        i: Value,
        write: bool,
        check: BoundsCheck,
    ) -> R<(Value, Type)> {
        let Type::Array(elem, n) = &fx.body.locals[local.0 as usize].ty else {
            return Err("not an array local".into());
        };
        let (elem, n) = ((**elem).clone(), *n);
        let base = match &fx.locals[local.0 as usize] {
            LocalStore::Stack(slot) => self.b.ins().stack_addr(types::I64, *slot, 0),
            LocalStore::Private(off) => self.private_addr(*off, elem.size() * n),
            LocalStore::Vars(_) | LocalStore::Group(_) => return Err("not an array local".into()),
        };
        let i64v = self.index64(i);
        let addr = self.element_addr(base, i64v, 0, elem.size());
        if check == BoundsCheck::Proven {
            return Ok((addr, elem));
        }
        let inb = self
            .b
            .ins()
            .icmp_imm_u(IntCC::UnsignedLessThan, i, n as i64);
        Ok((self.pick_address(inb, addr, write, check), elem))
    }

    /// How the access at `index` tests it against the bounds: not at all when `proven` (see
    /// [`InBounds`]); by a select in quads, whose bodies are mostly vector code (branches made
    /// the tiled matmul 3% slower), and for an index that is itself a select, the way
    /// predicated code sends an access it drops out of bounds (a filter scatter storing at
    /// `select(keep, pos, u32::MAX)` ran 5x slower with a branch on elements kept at random);
    /// by a branch otherwise.
    pub(super) fn bounds_check(&self, fx: &FnCtx, index: Handle, proven: bool) -> BoundsCheck {
        if proven {
            BoundsCheck::Proven
        } else if self.in_quads || matches!(fx.body.exprs[index.index()], Expr::Select { .. }) {
            BoundsCheck::Select
        } else {
            BoundsCheck::Branch
        }
    }

    /// `addr` where `inb` holds, else the sink (`write`) or the zeros, picked as `check` says.
    /// A branch goes to an out-of-line block: accesses are nearly always in bounds, so it is
    /// predicted and the access's address is known at once, where with a select the access
    /// (and the loads after a store) wait for the comparison. A work item's loop counting into
    /// a row of a device array ran 1.2x faster so. The out-of-line block reads the fallback
    /// from the frame, so it takes no register in the loop.
    pub(super) fn pick_address(
        &mut self,
        inb: Value,
        addr: Value,
        write: bool,
        check: BoundsCheck,
    ) -> Value {
        let slot = if write { SLOT_SINK } else { SLOT_ZEROS };
        if check != BoundsCheck::Branch {
            let fallback = if write { self.sink } else { self.zeros };
            return self.b.ins().select(inb, addr, fallback);
        }
        let (join, outside) = (self.b.create_block(), self.b.create_block());
        let picked = self.b.append_block_param(join, types::I64);
        self.b.set_cold_block(outside);
        self.b
            .ins()
            .brif(inb, join, &[BlockArg::Value(addr)], outside, &[]);
        self.b.switch_to_block(outside);
        // A plain load, which Cranelift does not merge with the one at entry.
        let fallback = self
            .b
            .ins()
            .load(types::I64, mem_flags(), self.frame, (slot * 8) as i32);
        self.b.ins().jump(join, &[BlockArg::Value(fallback)]);
        self.b.switch_to_block(join);
        picked
    }
}

/// Size of an array local, or why the CPU backend cannot hold it.
pub(super) fn array_bytes(l: &LocalDecl) -> R<u32> {
    let Type::Array(e, n) = &l.ty else {
        return Err(format!("local `{}` is not an array", l.name));
    };
    if e.size() > MAX_ELEM_BYTES {
        return Err(format!("array local `{}` has {}-byte elements; the CPU backend allows at most {MAX_ELEM_BYTES}", l.name, e.size()));
    }
    match e.size().checked_mul(*n) {
        Some(b) if b <= MAX_ARRAY_BYTES => Ok(b),
        _ => Err(format!(
            "array local `{}` ([{e}; {n}]) is larger than the {MAX_ARRAY_BYTES} bytes the CPU backend allows per work item; use shared memory or a buffer",
            l.name
        )),
    }
}
