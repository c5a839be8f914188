//! Loops: counted loops unrolled or rotated (exit test at the bottom), the block structure of
//! loops and branches, and the analyses that decide the loop form.

use super::*;

impl<'a, 'f> Lowerer<'a, 'f> {
    /// For a counted loop (`for i in START..END` with a constant start and step, as the IR
    /// builder writes it: `i = START; loop { if i >= END { break } .. } continuing { i = i +
    /// STEP }`): the counter, and the number of trips when END is a constant too and the loop
    /// runs at most `MAX_COUNTED_TRIPS` times and is small enough to copy four times. With an
    /// END computed before the loop, only an unsigned counter stepping by one counts (its last
    /// value is END - 1). The counter's value on entry must be a constant in the current
    /// block.
    pub(super) fn counted_loop(
        &mut self,
        fx: &FnCtx,
        body: &Block,
        continuing: &Block,
    ) -> Option<Counted> {
        let ex = |h: &Handle| &fx.body.exprs[h.index()];
        let (
            [Stmt::Eval(get), Stmt::Eval(test), Stmt::If {
                cond,
                accept,
                reject,
            }, rest @ ..],
            [Stmt::Eval(get2), Stmt::Eval(next), Stmt::LocalSet { local: set, value }],
        ) = (&body.0[..], &continuing.0[..])
        else {
            return None;
        };
        let (Expr::LocalGet(l), Expr::LocalGet(l2)) = (ex(get), ex(get2)) else {
            return None;
        };
        let Expr::Binary {
            op: op @ (BinaryOp::Ge | BinaryOp::Gt),
            lhs,
            rhs,
        } = ex(test)
        else {
            return None;
        };
        let Expr::Binary {
            op: BinaryOp::Add,
            lhs: step_lhs,
            rhs: step,
        } = ex(next)
        else {
            return None;
        };
        let Expr::Literal(step) = ex(step) else {
            return None;
        };
        let counted = l == l2
            && set == l
            && lhs == get
            && step_lhs == get2
            && value == next
            && cond == test
            && matches!(&accept.0[..], [Stmt::Break])
            && reject.0.is_empty()
            && !assigns(rest, *l);
        let signed = match step.ty() {
            ScalarType::I32 => true,
            ScalarType::U32 => false,
            _ => return None,
        };
        let LocalStore::Vars(vars) = &fx.locals[l.0 as usize] else {
            return None;
        };
        if !counted || vars.len() != 1 || fx.types[rhs.index()] != Type::Scalar(step.ty()) {
            return None;
        }
        let start = self.b.use_var(vars[0]);
        let start = self.constant_u32(start)?;
        let step = step.to_bits() as u32;
        let Expr::Literal(end) = ex(rhs) else {
            let stepped = !signed && step == 1 && *op == BinaryOp::Ge;
            return stepped.then_some(Counted {
                counter: *l,
                trips: None,
                last: Some(LastTrip::BeforeEnd(*rhs)),
            });
        };
        let end = end.to_bits() as u32;
        let done = |v: u32| match (op, signed) {
            (BinaryOp::Ge, true) => v as i32 >= end as i32,
            (BinaryOp::Gt, true) => v as i32 > end as i32,
            (BinaryOp::Ge, false) => v >= end,
            _ => v > end,
        };
        let (mut v, mut trips) = (start, 0u32);
        while !done(v) {
            trips += 1;
            if trips > MAX_COUNTED_TRIPS {
                return None;
            }
            v = v.wrapping_add(step);
        }
        let size = count_stmts(&body.0) + count_stmts(&continuing.0);
        // An unsigned counter that steps up without wrapping is largest on the last trip.
        let last = start as u64 + step as u64 * (trips.max(1) - 1) as u64;
        let last = (!signed && step > 0 && last <= u32::MAX as u64).then_some(last as u32);
        (size * trips.min(4) as usize <= MAX_UNROLLED_STMTS).then_some(Counted {
            counter: *l,
            trips: Some(trips),
            last: last.map(LastTrip::Constant),
        })
    }

    /// `loop { body } continuing { continuing }`, each part lowered by `part` with the loop's
    /// `continue` and `break` targets on `fx.loops`; with `enter`, the loop runs at all only
    /// when that flag is true. With `trips` (from [`Self::counted_loop`]) the loop is
    /// unrolled: up to 4 trips become straight-line copies of the body (less its exit test,
    /// which none of them takes) and of `continuing`; more trips, when 4 or 2 divides their
    /// number, become a loop whose every pass runs 4 or 2 copies and tests for the exit only
    /// before the first. (Unrolling further makes Cranelift keep every copy's loads live at
    /// once, placing the arithmetic that uses them at the end, and spill.) Other loops whose
    /// body opens with its exit test go to [`Self::lower_rotated_loop`] when `rotate` allows.
    pub(super) fn lower_loop(
        &mut self,
        fx: &mut FnCtx,
        parts: &LoopParts,
        part: &mut dyn FnMut(&mut Self, &mut FnCtx, &Block) -> R<()>,
    ) -> R<()> {
        let LoopParts {
            body,
            continuing,
            enter,
            trips,
            rotate,
        } = *parts;
        let copies = match trips {
            Some(t) if t > 4 && t % 4 == 0 => 4,
            Some(t) if t > 4 && t % 2 == 0 => 2,
            _ => 1,
        };
        if let Some(trips) = trips.filter(|t| *t <= 4) {
            let exit = self.b.create_block();
            self.enter_if(enter, exit);
            self.loop_copies(fx, body, continuing, trips, exit, part)?;
            self.b.ins().jump(exit, &[]);
            self.b.switch_to_block(exit);
            return Ok(());
        }
        if rotate {
            if let Some(head) = loop_head(fx, body) {
                return self.lower_rotated_loop(fx, parts, copies, head, part);
            }
        }
        let (header, cont, exit) = self.loop_blocks();
        match enter {
            Some(flag) => self.b.ins().brif(flag, header, &[], exit, &[]),
            None => self.b.ins().jump(header, &[]),
        };
        self.b.switch_to_block(header);
        fx.loops.push((cont, exit));
        part(self, fx, body)?;
        self.enter_continuing(body, cont);
        part(self, fx, continuing)?;
        fx.loops.pop();
        self.loop_copies(fx, body, continuing, copies - 1, exit, part)?;
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(exit);
        Ok(())
    }

    /// A loop whose body opens with its exit test (see [`loop_head`]) lowered with the test
    /// at the bottom: the test runs once before the loop and then after each pass, so that a
    /// pass ends in one conditional branch back to its top instead of a jump to a test. A
    /// counter that steps by one (see [`Self::wide_counter`]) is kept zero-extended to 64 bits
    /// in the loop, so that addresses use it as it is and the step and the test take one
    /// instruction each.
    pub(super) fn lower_rotated_loop(
        &mut self,
        fx: &mut FnCtx,
        parts: &LoopParts,
        copies: u32,
        head: Handle,
        part: &mut dyn FnMut(&mut Self, &mut FnCtx, &Block) -> R<()>,
    ) -> R<()> {
        let LoopParts {
            body,
            continuing,
            enter,
            ..
        } = *parts;
        let (header, cont, exit) = self.loop_blocks();
        self.enter_if(enter, exit);
        let test = Block(body.0[..2].to_vec());
        part(self, fx, &test)?;
        let done = self.get(fx, head)?[0];
        let counter = (copies == 1)
            .then(|| self.wide_counter(fx, body, continuing))
            .flatten();
        let mut args = Vec::new();
        if let Some(var) = counter {
            let first = self.b.use_var(var);
            args.push(BlockArg::Value(self.index64(first)));
            self.b.append_block_param(header, types::I64);
        }
        self.b.ins().brif(done, exit, &[], header, &args);
        self.b.switch_to_block(header);
        let wide = counter.map(|var| {
            let c = self.b.block_params(header)[0];
            self.def_zero_extended(var, c);
            c
        });
        let rest = without_exit_test(body);
        fx.loops.push((cont, exit));
        part(self, fx, &rest)?;
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
        let mut args = Vec::new();
        let done = match counter.zip(wide) {
            Some((var, c)) => {
                // The test `next >= END` in 64 bits, on the counter as it is kept.
                let next = self.b.ins().iadd_imm_u(c, 1);
                self.def_zero_extended(var, next);
                args.push(BlockArg::Value(next));
                let Expr::Binary { rhs: end, .. } = fx.body.exprs[head.index()] else {
                    return Err("a loop's exit test is not a comparison".into());
                };
                let end = self.get(fx, end)?[0];
                let end = self.index64(end);
                fx.loops.pop();
                self.b
                    .ins()
                    .icmp(IntCC::UnsignedGreaterThanOrEqual, next, end)
            }
            None => {
                part(self, fx, continuing)?;
                fx.loops.pop();
                self.loop_copies(fx, body, continuing, copies - 1, exit, part)?;
                part(self, fx, &test)?;
                self.get(fx, head)?[0]
            }
        };
        self.b.ins().brif(done, exit, &[], header, &args);
        self.b.switch_to_block(exit);
        Ok(())
    }

    /// `if c { accept } else { reject }` on a scalar `c`, each arm lowered by `arm`. Its
    /// blocks are sealed as soon as they have all their predecessors (arms jump nowhere but
    /// to the end and to enclosing loops), so the values after it are the arms' values.
    pub(super) fn branch(
        &mut self,
        fx: &mut FnCtx,
        c: Value,
        accept: &Block,
        reject: &Block,
        arm: &mut dyn FnMut(&mut Self, &mut FnCtx, &Block) -> R<()>,
    ) -> R<()> {
        let (then_b, else_b, merge) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().brif(c, then_b, &[], else_b, &[]);
        for (block, part) in [(then_b, accept), (else_b, reject)] {
            self.b.switch_to_block(block);
            self.b.seal_block(block);
            arm(self, fx, part)?;
            // An arm that ends in a jump leaves an empty block nothing reaches: joining it to
            // `merge` would give the values after the `if` a second, undefined source.
            let dead = self.unreached.is_some_and(|blk| {
                self.b.current_block() == Some(blk) && self.b.func.layout.first_inst(blk).is_none()
            });
            if !dead {
                self.b.ins().jump(merge, &[]);
            }
        }
        self.b.switch_to_block(merge);
        self.b.seal_block(merge);
        Ok(())
    }

    /// After a pass's `body` is lowered: goes on in `cont`, its `continue` target, when the
    /// body can `continue`, sealing it (no `continuing` jumps, an IR rule, so it has all its
    /// predecessors, and the counter's steps read the values they step from, as
    /// [`Self::proven_index`] needs). Otherwise `continuing` stays in the body's block, so
    /// that the copies of an unrolled pass share one block and Cranelift folds their loads
    /// into the instructions that use them.
    pub(super) fn enter_continuing(&mut self, body: &Block, cont: ir::Block) {
        if has_continue(&body.0) {
            self.b.ins().jump(cont, &[]);
            self.b.switch_to_block(cont);
            self.b.seal_block(cont);
        }
    }

    /// The value of `v` when an `iconst` defines it, as a `u32`.
    pub(super) fn constant_u32(&self, v: Value) -> Option<u32> {
        let dfg = &self.b.func.dfg;
        match dfg.value_def(dfg.resolve_aliases(v)) {
            ir::ValueDef::Result(inst, 0) => match dfg.insts[inst] {
                ir::InstructionData::UnaryImm {
                    opcode: ir::Opcode::Iconst,
                    imm,
                } => Some(imm.bits() as u32),
                _ => None,
            },
            _ => None,
        }
    }

    /// New blocks for a loop's top, its `continue` target and its exit.
    pub(super) fn loop_blocks(&mut self) -> (ir::Block, ir::Block, ir::Block) {
        (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        )
    }

    /// With a flag `enter`, goes on in a new block when it is true and to `exit` when false.
    pub(super) fn enter_if(&mut self, enter: Option<Value>, exit: ir::Block) {
        if let Some(flag) = enter {
            let first = self.b.create_block();
            self.b.ins().brif(flag, first, &[], exit, &[]);
            self.b.switch_to_block(first);
        }
    }

    /// Assigns the 32-bit variable `var` the low half of `wide`, whose high half is zero, and
    /// records that for [`Self::index64`].
    pub(super) fn def_zero_extended(&mut self, var: Variable, wide: Value) {
        let low = self.b.ins().ireduce(types::I32, wide);
        self.zero_extended.insert(low, wide);
        self.b.def_var(var, low);
    }

    /// For a loop whose body opens with `%a = i; %b = %a >= END; if %b { break }` on a `u32`
    /// local `i` kept in one variable, that the body does not assign, and whose `continuing`
    /// is `i = i + 1`: that variable. Such a counter never passes `u32::MAX` (it is below
    /// `END` before each step), so it can be kept zero-extended to 64 bits, the form
    /// addresses use.
    pub(super) fn wide_counter(
        &self,
        fx: &FnCtx,
        body: &Block,
        continuing: &Block,
    ) -> Option<Variable> {
        let ex = |h: &Handle| &fx.body.exprs[h.index()];
        let [Stmt::Eval(get), Stmt::Eval(test), _, rest @ ..] = &body.0[..] else {
            return None;
        };
        let [reads @ .., Stmt::LocalSet { local, value }] = &continuing.0[..] else {
            return None;
        };
        let Expr::LocalGet(l) = ex(get) else {
            return None;
        };
        let ge = matches!(ex(test), Expr::Binary { op: BinaryOp::Ge, lhs, .. } if lhs == get);
        let step = matches!(ex(value), Expr::Binary { op: BinaryOp::Add, lhs, rhs }
            if ex(lhs) == &Expr::LocalGet(*l)
                && ex(rhs) == &Expr::Literal(ScalarValue::U32(1)));
        // `continuing` computes nothing but the step, which this loop replaces.
        let pure = reads.iter().all(|s| {
            matches!(s, Stmt::Eval(h) if h == value
                || matches!(ex(h), Expr::LocalGet(_) | Expr::Literal(_)))
        });
        let LocalStore::Vars(vars) = &fx.locals[l.0 as usize] else {
            return None;
        };
        let fits = ge
            && step
            && pure
            && local == l
            && fx.types[get.index()] == Type::Scalar(ScalarType::U32)
            && vars.len() == 1
            && !assigns(rest, *l)
            && !self.in_quads;
        fits.then_some(vars[0])
    }

    /// `n` passes of a counted loop in straight line: the body without its exit test (the
    /// statement [`Self::counted_loop`] matched third), then `continuing`, each pass with
    /// its own `continue` target and `exit` as its `break` target.
    pub(super) fn loop_copies(
        &mut self,
        fx: &mut FnCtx,
        body: &Block,
        continuing: &Block,
        n: u32,
        exit: ir::Block,
        part: &mut dyn FnMut(&mut Self, &mut FnCtx, &Block) -> R<()>,
    ) -> R<()> {
        let copy = without_exit_test(body);
        for _ in 0..n {
            let cont = self.b.create_block();
            fx.loops.push((cont, exit));
            part(self, fx, &copy)?;
            self.enter_continuing(&copy, cont);
            part(self, fx, continuing)?;
            fx.loops.pop();
        }
        Ok(())
    }
}

/// A counted loop's body without its exit test (its third statement, `if %b { break }`, as
/// [`loop_head`] and [`Lowerer::counted_loop`] match it).
pub(super) fn without_exit_test(body: &Block) -> Block {
    let mut rest = body.clone();
    rest.0.remove(2);
    rest
}

/// For a loop body that opens as the IR builder's counted loops do (`%a = i; %b = %a >= END;
/// if %b { break }`), the exit test `%b`.
pub(super) fn loop_head(fx: &FnCtx, body: &Block) -> Option<Handle> {
    let [Stmt::Eval(get), Stmt::Eval(test), Stmt::If {
        cond,
        accept,
        reject,
    }, ..] = &body.0[..]
    else {
        return None;
    };
    let ex = |h: &Handle| &fx.body.exprs[h.index()];
    let opens = matches!(ex(get), Expr::LocalGet(_))
        && matches!(ex(test), Expr::Binary { op: BinaryOp::Ge | BinaryOp::Gt, lhs, .. } if lhs == get)
        && cond == test
        && matches!(&accept.0[..], [Stmt::Break])
        && reject.0.is_empty();
    opens.then_some(*test)
}

/// True if `stmts` assign local `l` anywhere.
pub(super) fn assigns(stmts: &[Stmt], l: LocalId) -> bool {
    let sets = |s: &Stmt| matches!(s, Stmt::LocalSet { local, .. } | Stmt::LocalIndexSet { local, .. } if *local == l);
    stmts.iter().any(|s| s.any(&sets))
}

/// The number of statements in `stmts`, nested ones included.
pub(super) fn count_stmts(stmts: &[Stmt]) -> usize {
    let mut n = 0;
    walk_stmts(stmts, &mut |_| n += 1);
    n
}

/// True if the statement contains a `break` or `continue` that leaves it (not one that
/// belongs to a loop inside it).
pub(super) fn escapes_loop(s: &Stmt) -> bool {
    s.any_outside_loops(&|s| matches!(s, Stmt::Break | Stmt::Continue))
}

/// True when `stmts` hold a `continue` of their own loop (not one of a loop inside them).
pub(super) fn has_continue(stmts: &[Stmt]) -> bool {
    stmts
        .iter()
        .any(|s| s.any_outside_loops(&|s| matches!(s, Stmt::Continue)))
}
