//! Work-item loops: runs of statements executed once per work item, the group-level code
//! between runs, and control flow that is uniform over the group.

use super::*;

impl<'a, 'f> Lowerer<'a, 'f> {
    /// Runs `stmts` once per work item of the group: four work items at a time where the
    /// statements allow it (see `simd`), then the work items left one at a time.
    pub(super) fn run_items(&mut self, fx: &mut FnCtx, stmts: &[Stmt]) -> R<()> {
        let start = match self.quad.clone() {
            Some(plan) if self.quad_fits(fx, &plan, stmts) => {
                self.in_quads = true;
                let end = self.quad_loop(fx, &plan, stmts);
                self.in_quads = false;
                Some(end?)
            }
            _ => None,
        };
        self.item_loop(fx, stmts, start)
    }

    /// Runs `stmts` once per work item of the group, from work item `start` (0 if `None`).
    /// A start other than 0 comes from the quad loop: the first work item of a
    /// one-dimensional group's last partial quad, or the group's end when quads covered it.
    pub(super) fn item_loop(
        &mut self,
        fx: &mut FnCtx,
        stmts: &[Stmt],
        start: Option<Value>,
    ) -> R<()> {
        let item_var = self.b.declare_var(types::I32);
        // Only the axes of the local id the kernel reads are kept (a dead counter would still
        // hold a register through the whole pass).
        let lvars: Vec<Variable> = (0..self.local_axes)
            .map(|_| self.b.declare_var(types::I32))
            .collect();
        let z = self.iconst32(0);
        let first = start.unwrap_or(z);
        self.b.def_var(item_var, first);
        for (a, var) in lvars.iter().enumerate() {
            self.b.def_var(*var, if a == 0 { first } else { z });
        }
        let (header, body, next, exit) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(header);
        let item = self.b.use_var(item_var);
        let more = (IntCC::UnsignedLessThan, item, self.total);
        enter_items_loop(&mut self.b, stmts, more, body, exit);
        self.b.switch_to_block(body);
        self.item = Some(item);
        self.lid = [z; 3];
        for (lid, var) in self.lid.iter_mut().zip(&lvars) {
            *lid = self.b.use_var(*var);
        }
        self.zero_locals(fx);
        // Barrier mode: the private scalar locals this run uses live in registers for a work
        // item's pass, loaded at its start and stored back at its end (`done`).
        let mut promoted = Vec::new();
        let done = if self.barrier_mode {
            let flag = self.private_addr(0, 4);
            let dead = self.b.ins().load(types::I32, mem_flags(), flag, 0);
            let live = self.b.create_block();
            self.b.ins().brif(dead, next, &[], live, &[]);
            self.b.switch_to_block(live);
            for l in runs::locals_used(stmts, fx.body) {
                let i = l.0 as usize;
                let (LocalStore::Private(off), ty) = (&fx.locals[i], &fx.body.locals[i].ty) else {
                    continue;
                };
                if matches!(ty, Type::Array(..)) {
                    continue;
                }
                let (off, ty) = (*off, ty.clone());
                let base = self.private_addr(off, ty.size());
                let vals = self.load_flat(&ty, base, 0);
                let vars = self.declare_vars(&ty);
                for (var, v) in vars.iter().zip(vals) {
                    self.b.def_var(*var, v);
                }
                fx.locals[i] = LocalStore::Vars(vars.clone());
                promoted.push((i, off, ty, vars));
            }
            for h in runs::outside_inputs(stmts, fx.body) {
                if self.runs.remat[h.index()] {
                    self.remat(fx, h)?;
                }
            }
            self.b.create_block()
        } else {
            next
        };
        let saved = self.item_next.replace(done);
        self.block(fx, stmts)?;
        self.item_next = saved;
        self.b.ins().jump(done, &[]);
        if done != next {
            self.b.switch_to_block(done);
            for (i, off, ty, vars) in promoted {
                let vals: Vec<Value> = vars.iter().map(|v| self.b.use_var(*v)).collect();
                let base = self.private_addr(off, ty.size());
                self.store_flat(&ty, base, 0, &vals);
                fx.locals[i] = LocalStore::Private(off);
            }
            self.b.ins().jump(next, &[]);
        }
        self.b.switch_to_block(next);
        let item = self.b.use_var(item_var);
        let item1 = self.b.ins().iadd_imm_s(item, 1);
        self.b.def_var(item_var, item1);
        // The next local id: one along x, wrapping into the next row and layer.
        let mut carry = self.iconst32(1);
        for (a, var) in lvars.iter().enumerate() {
            let l = self.b.use_var(*var);
            let l = self.b.ins().iadd(l, carry);
            let next = if a < 2 {
                let wraps = self.b.ins().icmp(IntCC::Equal, l, self.gsize[a]);
                carry = self.b.ins().uextend(types::I32, wraps);
                self.b.ins().select(wraps, z, l)
            } else {
                l
            };
            self.b.def_var(*var, next);
        }
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(exit);
        self.item = None;
        if fx.is_kernel && self.barrier_mode {
            self.forget_run_values(fx);
        }
        Ok(())
    }

    /// Forgets the values computed so far except those hoisted to group level: the others
    /// were computed where later code may not reach them (inside a work-item loop, or in an
    /// arm of a group-level `if`).
    pub(super) fn forget_run_values(&self, fx: &mut FnCtx) {
        for (i, v) in fx.vals.iter_mut().enumerate() {
            if !self.hoisted.get(i).copied().unwrap_or(false) {
                *v = None;
            }
        }
    }

    /// Barrier mode, at group level: the value of `h`, recomputing it when it is a
    /// group-uniform value that runs recompute (see `runs`).
    pub(super) fn group_value(&mut self, fx: &mut FnCtx, h: Handle) -> R<Vec<Value>> {
        if fx.vals[h.index()].is_none() && self.runs.uniform[h.index()] {
            self.remat(fx, h)?;
        }
        self.get(fx, h)
    }

    /// Barrier mode: lowers statement `s` once for the whole group (an evaluation hoisted out
    /// of its run, or an assignment to a group local).
    pub(super) fn group_stmt(&mut self, fx: &mut FnCtx, s: &Stmt) -> R<()> {
        let inputs = match s {
            Stmt::Eval(h) => operands(&fx.body.exprs[h.index()]),
            Stmt::LocalSet { value, .. } => vec![*value],
            other => return Err(format!("unexpected group-level statement {other:?}")),
        };
        for h in inputs {
            self.group_value(fx, h)?;
        }
        self.stmt(fx, s)?;
        if let Stmt::Eval(h) = s {
            self.hoisted[h.index()] = true;
        }
        self.forget_run_values(fx);
        Ok(())
    }

    /// Barrier mode: lowers a block whose statements may contain barriers.
    pub(super) fn uniform_block(
        &mut self,
        fx: &mut FnCtx,
        block: &Block,
        in_uniform_loop: bool,
    ) -> R<()> {
        let mut run: Vec<Stmt> = Vec::new();
        for s in &block.0 {
            match self.runs.placement(s, in_uniform_loop) {
                runs::Placement::Run => {
                    run.push(s.clone());
                    continue;
                }
                runs::Placement::Hoisted => {
                    self.group_stmt(fx, s)?;
                    continue;
                }
                runs::Placement::Group => {}
            }
            if !run.is_empty() {
                self.run_items(fx, &std::mem::take(&mut run))?;
            }
            match s {
                Stmt::Barrier(_) => {}
                Stmt::LocalSet { .. } => self.group_stmt(fx, s)?,
                Stmt::If {
                    cond,
                    accept,
                    reject,
                } => {
                    let c = self.group_value(fx, *cond)?[0];
                    self.forget_run_values(fx);
                    self.branch(fx, c, accept, reject, &mut |l, fx, arm| {
                        l.uniform_block(fx, arm, in_uniform_loop)
                    })?;
                }
                Stmt::Loop { body, continuing } => {
                    let parts = LoopParts {
                        body,
                        continuing,
                        enter: None,
                        trips: None,
                        rotate: false,
                    };
                    self.lower_loop(fx, &parts, &mut |l, fx, part| {
                        l.uniform_block(fx, part, true)
                    })?;
                }
                Stmt::Break => {
                    let (_, exit) = *fx.loops.last().ok_or("break outside a loop")?;
                    self.jump_to(exit, &[]);
                }
                Stmt::Continue => {
                    let (cont, _) = *fx.loops.last().ok_or("continue outside a loop")?;
                    self.jump_to(cont, &[]);
                }
                other => return Err(format!("unexpected group-level statement {other:?}")),
            }
        }
        if !run.is_empty() {
            self.run_items(fx, &run)?;
        }
        Ok(())
    }
}
