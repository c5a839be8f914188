//! Barrier mode: which values must live in per-item private memory, and which are computed
//! once for the whole group.
//!
//! A kernel with group barriers is lowered as runs of statements between barriers, each run a
//! loop over the group's work items (see the module above). A value only has to outlive its
//! run's loop iteration when another run, or the group-level control flow around the runs,
//! reads it; everything else stays in registers. This pass splits the body into runs exactly
//! as `Lowerer::uniform_block` does (both ask [`RunPlan::placement`]) and finds, for every
//! expression and every local, the runs that use it. Values computed from built-ins,
//! parameters and literals alone are recomputed in each run that reads them instead of living
//! in private memory: that costs a few arithmetic instructions instead of a store and loads,
//! and keeps indices built from the work item's id recognisable to the quad lowering.
//!
//! A local that every work item holds the same value of (a loop counter that steps from tile
//! to tile, a stride halved each round) is a group local: its assignments run once for the
//! whole group, between runs, and it lives in registers, so the loops around the runs test it
//! directly instead of reading work item 0's private copy and no run loads or stores it.

use kiln_ir::*;

/// What must live in private memory, and what is computed once per group.
#[derive(Default)]
pub(super) struct RunPlan {
    /// Per expression: computed in one run and read in another or by group-level control flow.
    pub spill: Vec<bool>,
    /// Per local: used in more than one run, or possibly read in its run before the run
    /// assigns it while the run repeats (in a loop that contains barriers), or an array.
    pub private: Vec<bool>,
    /// Per expression: a pure function of built-ins, parameters and literals, which a run
    /// that reads it recomputes (see [`rematerializable`]).
    pub remat: Vec<bool>,
    /// Per expression: the same value for every work item of the group (see [`group_values`]).
    pub uniform: Vec<bool>,
    /// Per local: a group local (see [`group_values`]).
    pub group_local: Vec<bool>,
}

/// Where barrier mode lowers one top-level statement of a block.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Placement {
    /// In the run it belongs to, once per work item.
    Run,
    /// Once for the whole group, before the run it sits in, which goes on after it: the
    /// evaluation of a group-uniform value that reads a group local. No statement of a run
    /// assigns a group local, so the value is the same wherever in the run it is computed.
    Hoisted,
    /// Once for the whole group, ending the run before it: a statement that holds a barrier,
    /// a `break` or `continue` leaving a loop that holds one, or an assignment to a group
    /// local.
    Group,
}

impl RunPlan {
    /// Where `s`, a top-level statement of a block (inside a loop that holds barriers when
    /// `in_uniform_loop`), is lowered.
    pub fn placement(&self, s: &Stmt, in_uniform_loop: bool) -> Placement {
        if group_control(s, in_uniform_loop) {
            return Placement::Group;
        }
        match s {
            Stmt::Eval(h) if self.uniform[h.index()] && !self.remat[h.index()] => {
                Placement::Hoisted
            }
            Stmt::LocalSet { local, .. } if self.group_local[local.0 as usize] => Placement::Group,
            _ => Placement::Run,
        }
    }
}

/// True when `s` runs at group level whatever it assigns: it holds a barrier, or it is (or
/// holds) a `break` or `continue` leaving a loop that holds barriers (`in_uniform_loop`).
fn group_control(s: &Stmt, in_uniform_loop: bool) -> bool {
    stmt_has_barrier(s)
        || (in_uniform_loop && super::loops::escapes_loop(s))
        || matches!(s, Stmt::Barrier(_))
}

/// Where a value is used: in a run, or by group-level control flow.
type Site = Option<u32>;

struct Walk<'a> {
    body: &'a Body,
    plan: RunPlan,
    next_run: u32,
    def: Vec<Site>,
    /// Per local: the run that used it first (outer `None`: not used yet).
    local_run: Vec<Option<u32>>,
    /// Per local: assigned on every path through the current run's statements so far, so a
    /// read there sees this pass's value.
    assigned: Vec<bool>,
}

/// The private-memory plan of a kernel body lowered in barrier mode.
pub(super) fn plan(body: &Body) -> RunPlan {
    let remat = rematerializable(body);
    let (uniform, group_local) = group_values(body);
    let mut w = Walk {
        body,
        plan: RunPlan {
            spill: vec![false; body.exprs.len()],
            private: body
                .locals
                .iter()
                .map(|l| matches!(l.ty, Type::Array(..)))
                .collect(),
            remat,
            uniform,
            group_local,
        },
        next_run: 0,
        def: vec![None; body.exprs.len()],
        local_run: vec![None; body.locals.len()],
        assigned: vec![false; body.locals.len()],
    };
    w.uniform_block(&body.block, false);
    w.plan
}

impl Walk<'_> {
    /// Mirrors `Lowerer::uniform_block`: consecutive statements placed in a run form one run
    /// (statements hoisted out of it do not end it).
    fn uniform_block(&mut self, block: &Block, in_uniform_loop: bool) {
        let mut run: Option<u32> = None;
        for s in &block.0 {
            match self.plan.placement(s, in_uniform_loop) {
                Placement::Run => {
                    let r = match run {
                        Some(r) => r,
                        None => {
                            self.next_run += 1;
                            self.assigned.fill(false);
                            self.next_run - 1
                        }
                    };
                    run = Some(r);
                    self.stmt(s, r, in_uniform_loop);
                    continue;
                }
                Placement::Hoisted => {
                    if let Stmt::Eval(h) = s {
                        for op in operands(&self.body.exprs[h.index()]) {
                            self.used(op, None);
                        }
                    }
                    continue;
                }
                Placement::Group => run = None,
            }
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
                Stmt::LocalSet { value, .. } => self.used(*value, None),
                _ => {}
            }
        }
    }

    /// A statement of run `r` (`repeats`: inside a loop that holds barriers).
    fn stmt(&mut self, s: &Stmt, r: u32, repeats: bool) {
        match s {
            Stmt::Eval(h) => {
                self.def[h.index()] = Some(r);
                for op in operands(&self.body.exprs[h.index()]) {
                    self.used(op, Some(r));
                }
                match &self.body.exprs[h.index()] {
                    Expr::LocalGet(l) | Expr::LocalIndex { local: l, .. } => {
                        self.local(*l, r, repeats, true)
                    }
                    _ => {}
                }
            }
            Stmt::LocalSet { local, value } => {
                self.used(*value, Some(r));
                self.local(*local, r, repeats, false);
                self.assigned[local.0 as usize] = true;
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
                let before = self.assigned.clone();
                for n in &accept.0 {
                    self.stmt(n, r, repeats);
                }
                let after_accept = std::mem::replace(&mut self.assigned, before);
                for n in &reject.0 {
                    self.stmt(n, r, repeats);
                }
                for (a, b) in self.assigned.iter_mut().zip(after_accept) {
                    *a &= b;
                }
            }
            Stmt::Loop { body, continuing } => {
                // A `break` may leave before any assignment in the loop.
                let before = self.assigned.clone();
                for n in body.0.iter().chain(&continuing.0) {
                    self.stmt(n, r, repeats);
                }
                self.assigned = before;
            }
            Stmt::Return(Some(h)) => self.used(*h, Some(r)),
            Stmt::Native(call) => {
                for n in &call.fallback.0 {
                    self.stmt(n, r, repeats);
                }
            }
            Stmt::Return(None)
            | Stmt::Break
            | Stmt::Continue
            | Stmt::Source(_)
            | Stmt::Barrier(_) => {}
        }
    }

    /// A use of `h` at `at`. A group-uniform value never needs private memory: group-level
    /// code computes it once (hoisted) or recomputes it (rematerializable), and runs read
    /// the group's copy or recompute it.
    fn used(&mut self, h: Handle, at: Site) {
        let i = h.index();
        let recomputed = at.is_some() && self.plan.remat[i];
        if self.def[i] != at && !recomputed && !self.plan.uniform[i] {
            self.plan.spill[i] = true;
        }
    }

    /// A use of local `l` in run `r` (a read when `read`). A run that repeats keeps the local
    /// in private memory when it may read it before assigning it in the same pass, where it
    /// would see the value its previous pass left.
    fn local(&mut self, l: LocalId, r: u32, repeats: bool, read: bool) {
        let i = l.0 as usize;
        if self.plan.group_local[i] {
            return;
        }
        if read && repeats && !self.assigned[i] {
            self.plan.private[i] = true;
        }
        match self.local_run[i] {
            None => self.local_run[i] = Some(r),
            Some(first) if first != r => self.plan.private[i] = true,
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
    computed_from(body, |e| {
        matches!(
            e,
            Expr::Literal(_) | Expr::Param(_) | Expr::Len(_) | Expr::Builtin(_)
        )
    })
}

/// Per expression: true when it is a leaf `leaf` accepts, or arithmetic, a comparison, a
/// cast or a select whose operands all are true.
fn computed_from(body: &Body, leaf: impl Fn(&Expr) -> bool) -> Vec<bool> {
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
        out.push(leaf(e) || (pure_op && operands(e).iter().all(|o| out[o.index()])));
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
                Stmt::Native(call) => walk(&call.fallback.0, body, defined, used),
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

/// Which expressions hold the same value for every work item of the group, and which locals
/// are group locals (in that order).
///
/// A group local is a local other than an array that is assigned only by top-level
/// statements of the blocks barrier mode splits into runs (never inside a statement of a
/// run), only under group-level `if`s whose conditions are group-uniform, and only group-
/// uniform values. A group-uniform expression is a literal, parameter, length or a built-in
/// the same across the group (group id, group size, group count, grid size, subgroup size),
/// the read of a group local, or arithmetic, comparisons, casts and selects of
/// group-uniform operands. The two depend on each other: start from every local and drop
/// those an assignment disqualifies until none is.
pub(super) fn group_values(body: &Body) -> (Vec<bool>, Vec<bool>) {
    let mut locals: Vec<bool> = body
        .locals
        .iter()
        .map(|l| !matches!(l.ty, Type::Array(..)))
        .collect();
    loop {
        let uniform = uniform_exprs(body, &locals);
        let mut kept = locals.clone();
        group_assignments(&body.block.0, &uniform, false, true, &mut kept);
        if kept == locals {
            return (uniform, locals);
        }
        locals = kept;
    }
}

/// Per expression: group-uniform, given which locals are group locals.
fn uniform_exprs(body: &Body, group_local: &[bool]) -> Vec<bool> {
    computed_from(body, |e| match e {
        Expr::Literal(_) | Expr::Param(_) | Expr::Len(_) => true,
        Expr::Builtin(b) => matches!(
            b,
            Builtin::GroupId(_)
                | Builtin::GroupSize(_)
                | Builtin::NumGroups(_)
                | Builtin::GlobalSize(_)
                | Builtin::SubgroupSize
        ),
        Expr::LocalGet(l) => group_local[l.0 as usize],
        _ => false,
    })
}

/// Clears `kept` for each local an assignment in `stmts` disqualifies as a group local (see
/// [`group_values`]). `stmts` is a block lowered in barrier mode (`in_uniform_loop`: inside
/// a loop that holds barriers) under group-uniform conditions when `uniform_control`.
fn group_assignments(
    stmts: &[Stmt],
    uniform: &[bool],
    in_uniform_loop: bool,
    uniform_control: bool,
    kept: &mut [bool],
) {
    for s in stmts {
        let group_level = group_control(s, in_uniform_loop);
        match s {
            Stmt::If {
                cond,
                accept,
                reject,
            } if group_level => {
                let control = uniform_control && uniform[cond.index()];
                for b in [accept, reject] {
                    group_assignments(&b.0, uniform, in_uniform_loop, control, kept);
                }
            }
            Stmt::Loop { body, continuing } if group_level => {
                for b in [body, continuing] {
                    group_assignments(&b.0, uniform, true, uniform_control, kept);
                }
            }
            Stmt::LocalSet { local, value } if !(uniform_control && uniform[value.index()]) => {
                kept[local.0 as usize] = false;
            }
            Stmt::LocalSet { .. } => {}
            Stmt::If { .. } | Stmt::Loop { .. } => walk_stmts(std::slice::from_ref(s), &mut |n| {
                if let Stmt::LocalSet { local, .. } = n {
                    kept[local.0 as usize] = false;
                }
            }),
            _ => {}
        }
    }
}
