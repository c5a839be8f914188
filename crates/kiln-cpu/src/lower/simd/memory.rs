//! Quad memory: contiguous vector loads and stores, widening loads of narrow integers, and
//! lane-by-lane accesses with bounds checks.

use super::*;

impl Lowerer<'_, '_> {
    /// A load of `m[index]` for each lane; `proven` when every lane's index is in bounds, and
    /// `wide` the contiguous index as [`Self::proven_index`] gives it.
    pub(super) fn quad_load(
        &mut self,
        qs: &QuadState,
        m: Memory,
        index: Handle,
        proven: bool,
        wide: Option<(Value, i64)>,
    ) -> R<Lanes> {
        let idx = qs.lanes[index.index()].ok_or("varying load with a uniform index")?;
        let (base, len, elem) = self.memory(m)?;
        let elem = elem
            .as_scalar()
            .ok_or("vector load of non-scalar elements")?;
        // 8- and 16-bit integers arrive in 32-bit lanes, extended as their type says.
        let widen = narrow(&Type::Scalar(elem));
        let lane_ty = if widen { ScalarType::U32 } else { elem };
        let gather = |l: &mut Self| {
            l.per_lane(&[(idx, ScalarType::U32)], lane_ty, |l, x| {
                let check = if proven {
                    BoundsCheck::Proven
                } else {
                    BoundsCheck::Select
                };
                let (addr, _, _) = l.mem_elem(m, x[0], false, check)?;
                let v = l.b.ins().load(clty(elem), mem_flags(), addr, 0);
                Ok(match (widen, elem.is_signed()) {
                    (false, _) => v,
                    (true, true) => l.b.ins().sextend(types::I32, v),
                    (true, false) => l.b.ins().uextend(types::I32, v),
                })
            })
        };
        let Some((first, guard)) = Self::contiguous(Some(idx)) else {
            return gather(self);
        };
        if let Some((first, step)) = wide {
            return Ok(self.load_contiguous(elem, base, first, step));
        }
        let first64 = self.b.ins().uextend(types::I64, first);
        if proven && guard.is_none() {
            return Ok(self.load_contiguous(elem, base, first64, 0));
        }
        let last = self.b.ins().iadd_imm_s(first64, 3);
        let mut inb = self.b.ins().icmp(IntCC::UnsignedLessThan, last, len);
        if let Some(c) = guard {
            inb = self.b.ins().band(inb, c);
        }
        let (fast, slow, done) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        let out = self.b.append_block_param(done, vty(elem));
        let out_hi = in_halves(elem).then(|| self.b.append_block_param(done, vty(elem)));
        // Only quads that straddle the end of the memory (or whose guard fails) gather: the
        // gather goes out of the way of the fast path's straight line.
        self.b.set_cold_block(slow);
        self.b.ins().brif(inb, fast, &[], slow, &[]);
        self.b.switch_to_block(fast);
        let v = self.load_contiguous(elem, base, first64, 0);
        self.b.ins().jump(done, &block_args(v));
        self.b.switch_to_block(slow);
        let v = gather(self)?;
        self.b.ins().jump(done, &block_args(v));
        self.b.switch_to_block(done);
        Ok(Lanes {
            hi: out_hi,
            ..Lanes::varying(out)
        })
    }

    /// The four elements of type `elem` from index `first + step` (`first` 64-bit) of the
    /// memory at `base` on: one vector (8- and 16-bit integers widened to 32-bit lanes), or
    /// two halves of a 64-bit type.
    pub(super) fn load_contiguous(
        &mut self,
        elem: ScalarType,
        base: Value,
        first: Value,
        step: i64,
    ) -> Lanes {
        let addr = self.element_addr(base, first, step, elem.size());
        if narrow(&Type::Scalar(elem)) {
            return Lanes::varying(self.load_widened(elem, addr));
        }
        let v = self.b.ins().load(vty(elem), vec_flags(), addr, 0);
        match in_halves(elem) {
            true => {
                let hi = self.b.ins().load(vty(elem), vec_flags(), addr, 16);
                Lanes::halves(v, hi)
            }
            false => Lanes::varying(v),
        }
    }

    /// Stores the four lanes of `v` (32-bit, or 64-bit in two halves) at index `first + step`
    /// (`first` 64-bit) of the memory at `base` on.
    pub(super) fn store_contiguous(&mut self, base: Value, first: Value, step: i64, v: Lanes) {
        let size = if v.hi.is_some() { 8 } else { 4 };
        let addr = self.element_addr(base, first, step, size);
        self.b.ins().store(vec_flags(), v.v, addr, 0);
        if let Some(hi) = v.hi {
            self.b.ins().store(vec_flags(), hi, addr, 16);
        }
    }

    /// Four adjacent 8- or 16-bit integers at `addr`, extended to an i32x4.
    pub(super) fn load_widened(&mut self, elem: ScalarType, addr: Value) -> Value {
        let (word, vector, lanes) = if elem.size() == 1 {
            (types::I32, types::I32X4, types::I8X16)
        } else {
            (types::I64, types::I64X2, types::I16X8)
        };
        let w = self.b.ins().load(word, vec_flags(), addr, 0);
        let v = self.b.ins().scalar_to_vector(vector, w);
        let mut v = self.b.ins().bitcast(lanes, mem_flags_little(), v);
        for _ in 0..(if elem.size() == 1 { 2 } else { 1 }) {
            v = if elem.is_signed() {
                self.b.ins().swiden_low(v)
            } else {
                self.b.ins().uwiden_low(v)
            };
        }
        v
    }

    pub(super) fn quad_store(
        &mut self,
        fx: &mut FnCtx,
        qs: &QuadState,
        m: Memory,
        index: Handle,
        value: Handle,
    ) -> R<()> {
        let v = self.quad_value(fx, qs, value)?;
        let idx = self.lanes_of(fx, qs, index)?;
        // A guard (or, in the prefix, an index `global_id(x)`) proves the index of every lane;
        // the store needs no lane mask only when every lane is active.
        let in_prefix = qs.prefix.as_ref().is_some_and(|p| p.gid[index.index()]);
        let proven = (fx.in_bounds.store(m, index, value)
            || in_prefix
            || fx.loop_proven.contains(&(m, index)))
            && qs.all_active();
        if let (true, Some((first, None))) = (proven, Self::contiguous(qs.lanes[index.index()])) {
            let (base, _, _) = self.memory(m)?;
            let (first, step) = match self.proven_index(fx, Some(qs), m, index)? {
                Some(wide) => wide,
                None => (self.b.ins().uextend(types::I64, first), 0),
            };
            self.store_contiguous(base, first, step, v);
            return Ok(());
        }
        let live = self.live(qs);
        let (fast, slow, done) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        match Self::contiguous(qs.lanes[index.index()]) {
            Some((first, guard)) => {
                let (base, len, _) = self.memory(m)?;
                let first64 = self.b.ins().uextend(types::I64, first);
                let last = self.b.ins().iadd_imm_s(first64, 3);
                let mut inb = self.b.ins().icmp(IntCC::UnsignedLessThan, last, len);
                if let Some(c) = guard {
                    inb = self.b.ins().band(inb, c);
                }
                let ok = if qs.all_active() {
                    // With every lane active only a quad at the end of the memory stores
                    // lane by lane.
                    self.b.set_cold_block(slow);
                    inb
                } else {
                    let all = self.b.ins().vall_true(live);
                    self.b.ins().band(inb, all)
                };
                self.b.ins().brif(ok, fast, &[], slow, &[]);
                self.b.switch_to_block(fast);
                self.store_contiguous(base, first64, 0, v);
                self.b.ins().jump(done, &[]);
            }
            None => {
                self.b.ins().jump(slow, &[]);
                self.b.switch_to_block(fast);
                self.b.ins().jump(done, &[]);
            }
        }
        self.b.switch_to_block(slow);
        for k in 0..4u8 {
            let on = self.b.ins().extractlane(live, k);
            let on = self.b.ins().icmp_imm_s(IntCC::NotEqual, on, 0);
            let i = self.b.ins().extractlane(idx, k);
            let x = self.lane(v, k);
            let (addr, _, _) = self.mem_elem(m, i, true, BoundsCheck::Select)?;
            let addr = self.b.ins().select(on, addr, self.sink);
            self.b.ins().store(mem_flags(), x, addr, 0);
        }
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(done);
        Ok(())
    }
}

/// Flags of the 16-byte loads and stores of a quad: they cannot trap, but need not be aligned
/// (the `aligned` flag would let Cranelift fold them into SSE instructions that fault on
/// addresses that are not 16-byte aligned).
pub(super) fn vec_flags() -> cranelift_codegen::ir::MemFlagsData {
    let mut f = cranelift_codegen::ir::MemFlagsData::new();
    f.set_notrap();
    f
}

pub(super) fn mem_flags_little() -> cranelift_codegen::ir::MemFlagsData {
    let mut f = cranelift_codegen::ir::MemFlagsData::new();
    f.set_endianness(cranelift_codegen::ir::Endianness::Little);
    f
}
