//! Barrier mode: which values must live in per-item private memory.
//!
//! A kernel with group barriers is lowered as runs of statements between barriers, each run a
//! loop over the group's work items (see the module above). A value only has to outlive its
//! run's loop iteration when another run, or the group-level control flow around the runs,
//! reads it; everything else stays in registers. This pass splits the body into runs exactly
//! as `Lowerer::uniform_block` does and finds, for every expression and every local, the runs
//! that use it. Values computed from built-ins, parameters and literals alone are recomputed
//! in each run that reads them instead of living in private memory: that costs a few
//! arithmetic instructions instead of a store and loads, and keeps indices built from the
//! work item's id recognisable to the quad lowering.

use kiln_ir::*;

/// What must live in private memory.
pub(super) struct RunPlan {
    /// Per expression: computed in one run and read in another or by group-level control flow.
    pub spill: Vec<bool>,
    /// Per local: used in more than one run, or possibly read in its run before the run
    /// assigns it while the run repeats (in a loop that contains barriers), or an array.
    pub private: Vec<bool>,
    /// Per expression: a pure function of built-ins, parameters and literals, which a run
    /// that reads it recomputes (see [`rematerializable`]).
    pub remat: Vec<bool>,
}

/// Where a value is used: in a run, or by group-level control flow.
type Site = Option<u32>;

struct Walk<'a> {
    body: &'a Body,
    remat: Vec<bool>,
    next_run: u32,
    def: Vec<Site>,
    spill: Vec<bool>,
    /// Per local: the run that used it first (outer `None`: not used yet).
    local_run: Vec<Option<u32>>,
    private: Vec<bool>,
}

/// The private-memory plan of a kernel body lowered in barrier mode.
pub(super) fn plan(body: &Body) -> RunPlan {
    let mut w = Walk {
        body,
        remat: rematerializable(body),
        next_run: 0,
        def: vec![None; body.exprs.len()],
        spill: vec![false; body.exprs.len()],
        local_run: vec![None; body.locals.len()],
        private: body
            .locals
            .iter()
            .map(|l| matches!(l.ty, Type::Array(..)))
            .collect(),
    };
    w.uniform_block(&body.block, false);
    RunPlan {
        spill: w.spill,
        private: w.private,
        remat: w.remat,
    }
}

impl Walk<'_> {
    /// Mirrors `Lowerer::uniform_block`: consecutive statements without a barrier (or a
    /// `break`/`continue` leaving a loop that contains barriers) form one run.
    fn uniform_block(&mut self, block: &Block, in_uniform_loop: bool) {
        let mut run: Option<u32> = None;
        for s in &block.0 {
            let uniform = stmt_has_barrier(s)
                || (in_uniform_loop && super::escapes_loop(s))
                || matches!(s, Stmt::Barrier(_));
            if !uniform {
                let r = *run.get_or_insert_with(|| {
                    self.next_run += 1;
                    self.next_run - 1
                });
                self.stmt(s, r, in_uniform_loop, true);
                continue;
            }
            run = None;
            match s {
                Stmt::If {
                    cond,
                    accept,
                    reject,
                } => {
                    self.used(*cond, None);
                    self.uniform_block(accept, in_uniform_loop);
                    self.uniform_block(reject, in_uniform_loop);
                }
                Stmt::Loop { body, continuing } => {
                    self.uniform_block(body, true);
                    self.uniform_block(continuing, true);
                }
                _ => {}
            }
        }
    }

    /// A statement of run `r`; `top` when it is one of the run's own statements rather than
    /// nested in one of them.
    fn stmt(&mut self, s: &Stmt, r: u32, repeats: bool, top: bool) {
        match s {
            Stmt::Eval(h) => {
                self.def[h.index()] = Some(r);
                for op in operands(&self.body.exprs[h.index()]) {
                    self.used(op, Some(r));
                }
                match &self.body.exprs[h.index()] {
                    Expr::LocalGet(l) | Expr::LocalIndex { local: l, .. } => {
                        self.local(*l, r, repeats, false)
                    }
                    _ => {}
                }
            }
            Stmt::LocalSet { local, value } => {
                self.used(*value, Some(r));
                self.local(*local, r, repeats, top);
            }
            Stmt::LocalIndexSet {
                local,
                index,
                value,
            } => {
                self.used(*index, Some(r));
                self.used(*value, Some(r));
                self.local(*local, r, repeats, false);
            }
            Stmt::Store { index, value, .. } => {
                self.used(*index, Some(r));
                self.used(*value, Some(r));
            }
            Stmt::If {
                cond,
                accept,
                reject,
            } => {
                self.used(*cond, Some(r));
                for n in accept.0.iter().chain(&reject.0) {
                    self.stmt(n, r, repeats, false);
                }
            }
            Stmt::Loop { body, continuing } => {
                for n in body.0.iter().chain(&continuing.0) {
                    self.stmt(n, r, repeats, false);
                }
            }
            Stmt::Return(Some(h)) => self.used(*h, Some(r)),
            Stmt::Return(None)
            | Stmt::Break
            | Stmt::Continue
            | Stmt::Source(_)
            | Stmt::Barrier(_) => {}
        }
    }

    fn used(&mut self, h: Handle, at: Site) {
        let recomputed = at.is_some() && self.remat[h.index()];
        if self.def[h.index()] != at && !recomputed {
            self.spill[h.index()] = true;
        }
    }

    /// A use of local `l` in run `r`. The first use decides whether a run that repeats could
    /// read the value its previous pass left: only a run's own top-level assignment rules
    /// that out.
    fn local(&mut self, l: LocalId, r: u32, repeats: bool, assigns_at_top: bool) {
        let i = l.0 as usize;
        match self.local_run[i] {
            None => {
                self.local_run[i] = Some(r);
                if repeats && !assigns_at_top {
                    self.private[i] = true;
                }
            }
            Some(first) if first != r => self.private[i] = true,
            Some(_) => {}
        }
    }
}

/// The locals `stmts` read or assign, each once, in order of first use.
pub(super) fn locals_used(stmts: &[Stmt], body: &Body) -> Vec<LocalId> {
    fn add(out: &mut Vec<LocalId>, l: LocalId) {
        if !out.contains(&l) {
            out.push(l);
        }
    }
    fn walk(stmts: &[Stmt], body: &Body, out: &mut Vec<LocalId>) {
        for s in stmts {
            match s {
                Stmt::Eval(h) => match &body.exprs[h.index()] {
                    Expr::LocalGet(l) | Expr::LocalIndex { local: l, .. } => add(out, *l),
                    _ => {}
                },
                Stmt::LocalSet { local, .. } | Stmt::LocalIndexSet { local, .. } => {
                    add(out, *local)
                }
                Stmt::If { accept, reject, .. } => {
                    walk(&accept.0, body, out);
                    walk(&reject.0, body, out);
                }
                Stmt::Loop {
                    body: b,
                    continuing,
                } => {
                    walk(&b.0, body, out);
                    walk(&continuing.0, body, out);
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(stmts, body, &mut out);
    out
}

/// Per expression: true when its value depends only on built-ins, parameters and literals
/// through arithmetic, comparisons, casts and selects, so any run can recompute it.
pub(super) fn rematerializable(body: &Body) -> Vec<bool> {
    let mut out: Vec<bool> = Vec::with_capacity(body.exprs.len());
    for e in &body.exprs {
        let pure_op = matches!(
            e,
            Expr::Binary { .. }
                | Expr::Unary { .. }
                | Expr::Select { .. }
                | Expr::Cast { .. }
                | Expr::Bitcast { .. }
        );
        let leaf = matches!(
            e,
            Expr::Literal(_) | Expr::Param(_) | Expr::Len(_) | Expr::Builtin(_)
        );
        out.push(leaf || (pure_op && operands(e).iter().all(|o| out[o.index()])));
    }
    out
}

/// The expressions `stmts` read but do not compute, in handle order.
pub(super) fn outside_inputs(stmts: &[Stmt], body: &Body) -> Vec<Handle> {
    fn walk(stmts: &[Stmt], body: &Body, defined: &mut Vec<bool>, used: &mut Vec<Handle>) {
        for s in stmts {
            match s {
                Stmt::Eval(h) => {
                    defined[h.index()] = true;
                    used.extend(operands(&body.exprs[h.index()]));
                }
                Stmt::LocalSet { value, .. } => used.push(*value),
                Stmt::LocalIndexSet { index, value, .. } | Stmt::Store { index, value, .. } => {
                    used.extend([*index, *value])
                }
                Stmt::If {
                    cond,
                    accept,
                    reject,
                } => {
                    used.push(*cond);
                    walk(&accept.0, body, defined, used);
                    walk(&reject.0, body, defined, used);
                }
                Stmt::Loop {
                    body: b,
                    continuing,
                } => {
                    walk(&b.0, body, defined, used);
                    walk(&continuing.0, body, defined, used);
                }
                Stmt::Return(Some(h)) => used.push(*h),
                Stmt::Return(None)
                | Stmt::Break
                | Stmt::Continue
                | Stmt::Source(_)
                | Stmt::Barrier(_) => {}
            }
        }
    }
    let (mut defined, mut used) = (vec![false; body.exprs.len()], Vec::new());
    walk(stmts, body, &mut defined, &mut used);
    used.retain(|h| !defined[h.index()]);
    used.sort_by_key(|h| h.index());
    used.dedup();
    used
}
