//! Barrier mode: which values must live in per-item private memory.
//!
//! A kernel with group barriers is lowered as runs of statements between barriers, each run a
//! loop over the group's work items (see the module above). A value only has to outlive its
//! run's loop iteration when another run, or the group-level control flow around the runs,
//! reads it; everything else stays in registers. This pass splits the body into runs exactly
//! as `Lowerer::uniform_block` does and finds, for every expression and every local, the runs
//! that use it.

use kiln_ir::*;

/// What must live in private memory.
pub(super) struct RunPlan {
    /// Per expression: computed in one run and read in another or by group-level control flow.
    pub spill: Vec<bool>,
    /// Per local: used in more than one run, or possibly read in its run before the run
    /// assigns it while the run repeats (in a loop that contains barriers), or an array.
    pub private: Vec<bool>,
}

/// Where a value is used: in a run, or by group-level control flow.
type Site = Option<u32>;

struct Walk<'a> {
    body: &'a Body,
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
        if self.def[h.index()] != at {
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
