//! Which kernels and statements run four work items at a time: the quad plan (which
//! expressions and locals vary per work item, loads that widen), the facts that hold for a
//! group's prefix of full quads, and the statement shapes quads accept.

use super::*;

/// How a kernel runs in quads: which of its expressions and locals vary per work item.
pub(in crate::lower) struct QuadPlan {
    pub(super) varying_exprs: Vec<bool>,
    pub(super) varying_locals: Vec<bool>,
    /// Per expression: a load of 8- or 16-bit integers whose only uses are casts to 32-bit
    /// types, which quads widen as they load.
    pub(super) widened: Vec<bool>,
    pub(super) prefix: Rc<PrefixFacts>,
}

/// Facts about the global id along x that hold for every work item of a group's quads up to
/// a count worked out once per call, so that in those quads the accesses and conditions
/// below need no test. A group of a launch over `n` items has all its quads there except the
/// group that holds item `n`.
pub(super) struct PrefixFacts {
    /// Per expression: `global_id(x)`.
    pub(super) gid: Vec<bool>,
    /// Per expression: a condition true for every item of the prefix: `gid < b` (or `b >
    /// gid`) for a `b` in `bounds`, the literal `true`, or `&&` of those.
    pub(super) holds: Vec<bool>,
    /// The bounds of the `gid < b` comparisons: `u32` literals, parameters, lengths, and
    /// `min` of those.
    pub(super) bounds: Vec<Handle>,
    /// The memories loaded or stored at index `gid`: in the prefix, those accesses are in
    /// bounds.
    pub(super) memories: Vec<Memory>,
}

impl PrefixFacts {
    /// The facts of `body`, a kernel of parameters `params`.
    pub(super) fn of(body: &Body, params: &[Param]) -> PrefixFacts {
        let n = body.exprs.len();
        let (mut gid, mut holds, mut fixed) = (vec![false; n], vec![false; n], vec![false; n]);
        let (mut bounds, mut memories) = (Vec::new(), Vec::new());
        let u32_param = |i: u32| {
            params
                .get(i as usize)
                .is_some_and(|p| matches!(p.kind, ParamKind::Value(Type::Scalar(ScalarType::U32))))
        };
        for (h, e) in body.exprs.iter().enumerate() {
            match e {
                Expr::Builtin(Builtin::GlobalId(Axis::X)) => gid[h] = true,
                Expr::Literal(ScalarValue::U32(_)) | Expr::Len(_) => fixed[h] = true,
                Expr::Param(i) => fixed[h] = u32_param(*i),
                Expr::Math {
                    fun: MathFn::Min,
                    args,
                } => fixed[h] = args.iter().all(|a| fixed[a.index()]),
                Expr::Literal(ScalarValue::Bool(true)) => holds[h] = true,
                Expr::Binary {
                    op: op @ (BinaryOp::Lt | BinaryOp::Gt),
                    lhs,
                    rhs,
                } => {
                    // `gid < b` or `b > gid`.
                    let (id, bound) = match op {
                        BinaryOp::Lt => (lhs, rhs),
                        _ => (rhs, lhs),
                    };
                    if gid[id.index()] && fixed[bound.index()] {
                        holds[h] = true;
                        bounds.push(*bound);
                    }
                }
                Expr::Binary {
                    op: BinaryOp::And,
                    lhs,
                    rhs,
                } => holds[h] = holds[lhs.index()] && holds[rhs.index()],
                Expr::Load { memory, index } if gid[index.index()] => memories.push(*memory),
                _ => {}
            }
        }
        walk_stmts(&body.block.0, &mut |s| {
            if let Stmt::Store { memory, index, .. } = s {
                if gid[index.index()] {
                    memories.push(*memory);
                }
            }
        });
        PrefixFacts {
            gid,
            holds,
            bounds,
            memories,
        }
    }

    /// True when a call is worth running in two versions: some fact exists, and `stmts` have
    /// no loop (whose trips would make the tests saved per quad a small part of its time and
    /// double a larger body).
    pub(super) fn worth_it(&self, stmts: &[Stmt]) -> bool {
        let mut looped = false;
        walk_stmts(stmts, &mut |s| looped |= matches!(s, Stmt::Loop { .. }));
        let any_fact = !self.bounds.is_empty() || !self.memories.is_empty();
        any_fact && !looped
    }
}

/// The vector type that holds a quad's lanes of a value of type `s`: for the 64-bit types,
/// one half.
pub(super) fn vty(s: ScalarType) -> types::Type {
    match s {
        ScalarType::F32 => types::F32X4,
        ScalarType::F64 => types::F64X2,
        ScalarType::I64 | ScalarType::U64 => types::I64X2,
        _ => types::I32X4,
    }
}

/// True for the 64-bit types, whose four lanes a quad keeps in two vectors (see `wide`).
pub(super) fn in_halves(s: ScalarType) -> bool {
    matches!(s, ScalarType::F64 | ScalarType::I64 | ScalarType::U64)
}

pub(super) fn allowed(t: &Type) -> bool {
    matches!(
        t,
        Type::Scalar(
            ScalarType::F32
                | ScalarType::F64
                | ScalarType::I32
                | ScalarType::U32
                | ScalarType::I64
                | ScalarType::U64
                | ScalarType::Bool
        )
    )
}

/// True for the built-ins that differ between the work items of a quad.
pub(super) fn varying_builtin(b: Builtin) -> bool {
    matches!(
        b,
        Builtin::GlobalId(Axis::X)
            | Builtin::LocalId(Axis::X)
            | Builtin::LocalIndex
            | Builtin::SubgroupId
    )
}

pub(super) fn expr_ok(e: &Expr) -> bool {
    !matches!(
        e,
        Expr::LocalIndex { .. }
            | Expr::Atomic { .. }
            | Expr::Call { .. }
            | Expr::Compose { .. }
            | Expr::Extract { .. }
    )
}

/// True if `b` stores to a buffer.
pub(super) fn stores(b: &Block) -> bool {
    b.any(&|s| matches!(s, Stmt::Store { .. }))
}

/// Finds which expressions and locals vary per work item over the whole kernel body, so a
/// value one run of a barrier kernel computes is known in the runs that read it. Marking too
/// much is always safe (the value is then kept per lane); marking too little is not.
pub(super) struct Variance<'a> {
    pub(super) body: &'a Body,
    pub(super) exprs: Vec<bool>,
    pub(super) locals: Vec<bool>,
    /// Per local, [`local_scopes`].
    pub(super) scopes: Vec<Option<usize>>,
    pub(super) changed: bool,
}

/// Numbers the blocks of a body in the order [`Variance::mark_locals`] visits them (the body
/// itself is 0) and records, per local, where it is accessed.
pub(super) struct ScopeWalk<'a> {
    pub(super) body: &'a Body,
    pub(super) parents: Vec<usize>,
    /// Per local, the blocks it is accessed in directly.
    pub(super) blocks: Vec<Vec<usize>>,
    /// Per (block, local): whether the first statement of the block that accesses the local
    /// (directly or in a nested block) assigns it directly.
    pub(super) first_is_set: std::collections::HashMap<(usize, usize), bool>,
}

impl ScopeWalk<'_> {
    pub(super) fn access(&mut self, path: &[usize], local: usize, set: bool) {
        let here = *path.last().expect("a block");
        self.blocks[local].push(here);
        for &b in path {
            self.first_is_set
                .entry((b, local))
                .or_insert(set && b == here);
        }
    }

    pub(super) fn walk(&mut self, b: &Block, path: &mut Vec<usize>) {
        for s in &b.0 {
            match s {
                Stmt::LocalSet { local, .. } => self.access(path, local.0 as usize, true),
                Stmt::LocalIndexSet { local, .. } => self.access(path, local.0 as usize, false),
                Stmt::Eval(h) => match &self.body.exprs[h.index()] {
                    Expr::LocalGet(l) | Expr::LocalIndex { local: l, .. } => {
                        self.access(path, l.0 as usize, false)
                    }
                    _ => {}
                },
                Stmt::If { accept, reject, .. } => {
                    self.nested(accept, path);
                    self.nested(reject, path);
                }
                Stmt::Loop { body, continuing } => {
                    self.nested(body, path);
                    self.nested(continuing, path);
                }
                _ => {}
            }
        }
    }

    pub(super) fn nested(&mut self, b: &Block, path: &mut Vec<usize>) {
        let id = self.parents.len();
        self.parents.push(*path.last().expect("a block"));
        path.push(id);
        self.walk(b, path);
        path.pop();
    }
}

/// Per local: the innermost block that holds every access to it, when the first statement
/// of that block to access it assigns it directly, so each time the block runs the local is
/// assigned before it is read; `None` otherwise. Control flow that varies outside that block
/// does not make the local vary: only work items running the block see it (a `for` counter
/// inside an `if i < n` stays the same for all four lanes).
pub(super) fn local_scopes(body: &Body) -> Vec<Option<usize>> {
    let mut w = ScopeWalk {
        body,
        parents: vec![usize::MAX],
        blocks: vec![Vec::new(); body.locals.len()],
        first_is_set: Default::default(),
    };
    w.walk(&body.block, &mut vec![0]);
    let ancestors = |mut b: usize| {
        let mut chain = vec![b];
        while b != 0 {
            b = w.parents[b];
            chain.push(b);
        }
        chain.reverse();
        chain
    };
    w.blocks
        .iter()
        .enumerate()
        .map(|(local, blocks)| {
            let mut common = ancestors(*blocks.first()?);
            for b in &blocks[1..] {
                let chain = ancestors(*b);
                let same = common
                    .iter()
                    .zip(&chain)
                    .take_while(|(x, y)| x == y)
                    .count();
                common.truncate(same);
            }
            let scope = *common.last()?;
            (w.first_is_set.get(&(scope, local)) == Some(&true)).then_some(scope)
        })
        .collect()
}

impl Variance<'_> {
    pub(super) fn mark_exprs(&mut self) {
        for (i, e) in self.body.exprs.iter().enumerate() {
            let v = match e {
                Expr::Builtin(b) => varying_builtin(*b),
                Expr::LocalGet(l) => self.locals[l.0 as usize],
                // Atomics return a different value to each work item; array elements and calls
                // are not followed.
                Expr::Atomic { .. }
                | Expr::Subgroup { .. }
                | Expr::LocalIndex { .. }
                | Expr::Call { .. } => true,
                e => operands(e).iter().any(|o| self.exprs[o.index()]),
            };
            if v && !self.exprs[i] {
                self.exprs[i] = true;
                self.changed = true;
            }
        }
    }

    pub(super) fn set_local(&mut self, l: LocalId) {
        if !self.locals[l.0 as usize] {
            self.locals[l.0 as usize] = true;
            self.changed = true;
        }
    }

    /// Marks the locals `b` assigns a varying value, or assigns under control flow that
    /// differs between work items inside the local's scope ([`local_scopes`]). `path` holds
    /// the blocks from the body down to `b`, each with whether entering it makes control
    /// flow vary (an arm of an `if` on a varying condition, a loop that work items may leave
    /// at different times); `next` numbers the blocks as [`ScopeWalk`] does.
    pub(super) fn mark_locals(
        &mut self,
        b: &Block,
        path: &mut Vec<(usize, bool)>,
        next: &mut usize,
    ) {
        for s in &b.0 {
            match s {
                Stmt::LocalSet { local, value } => {
                    let after = match self.scopes[local.0 as usize] {
                        Some(scope) => path.iter().position(|(b, _)| *b == scope).unwrap_or(0),
                        None => 0,
                    };
                    let ctl = path[after + 1..].iter().any(|(_, varies)| *varies);
                    if ctl || self.exprs[value.index()] {
                        self.set_local(*local)
                    }
                }
                Stmt::LocalIndexSet { local, .. } => self.set_local(*local),
                Stmt::If {
                    cond,
                    accept,
                    reject,
                } => {
                    let c = self.exprs[cond.index()];
                    self.mark_nested(accept, c, path, next);
                    self.mark_nested(reject, c, path, next);
                }
                Stmt::Loop { body, continuing } => {
                    let c = varying_exit(&self.exprs, body, false)
                        || varying_exit(&self.exprs, continuing, false);
                    self.mark_nested(body, c, path, next);
                    self.mark_nested(continuing, c, path, next);
                }
                _ => {}
            }
        }
    }

    pub(super) fn mark_nested(
        &mut self,
        b: &Block,
        varies: bool,
        path: &mut Vec<(usize, bool)>,
        next: &mut usize,
    ) {
        *next += 1;
        path.push((*next, varies));
        self.mark_locals(b, path, next);
        path.pop();
    }
}

/// True if `b`, part of a loop, may make some work items leave an iteration (or the loop)
/// that others go on with: a `break`, `continue` or `return` under a condition that varies
/// (`varying_exprs`) per work item (`under`: `b` itself runs under one).
pub(super) fn varying_exit(varying_exprs: &[bool], b: &Block, under: bool) -> bool {
    b.0.iter().any(|s| match s {
        Stmt::Break | Stmt::Continue | Stmt::Return(_) => under,
        Stmt::If {
            cond,
            accept,
            reject,
        } => {
            let u = under || varying_exprs[cond.index()];
            varying_exit(varying_exprs, accept, u) || varying_exit(varying_exprs, reject, u)
        }
        Stmt::Loop { body, continuing } => {
            varying_exit(varying_exprs, body, under)
                || varying_exit(varying_exprs, continuing, under)
        }
        _ => false,
    })
}

/// Which expressions and locals of kernel `k` vary per work item, or `None` when the kernel
/// never runs in quads: a kernel with group barriers that returns early (its work items that
/// returned are skipped one by one in every later run).
pub(in crate::lower) fn quad_plan(k: &Kernel) -> Option<QuadPlan> {
    if k.has_group_barrier() && block_has_return(&k.body.block) {
        return None;
    }
    let mut v = Variance {
        body: &k.body,
        exprs: vec![false; k.body.exprs.len()],
        locals: vec![false; k.body.locals.len()],
        scopes: local_scopes(&k.body),
        changed: true,
    };
    while v.changed {
        v.changed = false;
        v.mark_exprs();
        v.mark_locals(&k.body.block, &mut vec![(0, false)], &mut 0);
    }
    Some(QuadPlan {
        varying_exprs: v.exprs,
        varying_locals: v.locals,
        widened: widened_loads(&k.body),
        prefix: Rc::new(PrefixFacts::of(&k.body, &k.params)),
    })
}

pub(super) fn narrow(t: &Type) -> bool {
    matches!(
        t,
        Type::Scalar(ScalarType::I8 | ScalarType::U8 | ScalarType::I16 | ScalarType::U16)
    )
}

/// Per expression: a load (of any type) that no statement uses directly and that every other
/// expression uses only through a cast to a 32-bit type.
pub(super) fn widened_loads(body: &Body) -> Vec<bool> {
    let mut ok: Vec<bool> = body
        .exprs
        .iter()
        .map(|e| matches!(e, Expr::Load { .. }))
        .collect();
    for e in &body.exprs {
        let cast32 = matches!(
            e,
            Expr::Cast {
                to: ScalarType::I32 | ScalarType::U32 | ScalarType::F32,
                ..
            }
        );
        if !cast32 {
            for o in operands(e) {
                ok[o.index()] = false;
            }
        }
    }
    walk_stmts(&body.block.0, &mut |s| {
        let direct: Vec<Handle> = match s {
            Stmt::LocalSet { value, .. } => vec![*value],
            Stmt::LocalIndexSet { index, value, .. } | Stmt::Store { index, value, .. } => {
                vec![*index, *value]
            }
            Stmt::If { cond, .. } => vec![*cond],
            Stmt::Return(Some(h)) => vec![*h],
            _ => Vec::new(),
        };
        for h in direct {
            ok[h.index()] = false;
        }
    });
    ok
}

/// False when `stmts` hold a statement or expression without a quad form.
pub(super) fn control_fits(body: &Body, stmts: &[Stmt]) -> bool {
    stmts.iter().all(|s| match s {
        Stmt::Eval(h) => expr_ok(&body.exprs[h.index()]),
        Stmt::Store { .. }
        | Stmt::LocalSet { .. }
        | Stmt::Source(_)
        | Stmt::Return(None)
        | Stmt::Break
        | Stmt::Continue => true,
        Stmt::If { accept, reject, .. } => {
            control_fits(body, &accept.0) && control_fits(body, &reject.0)
        }
        Stmt::Loop {
            body: b,
            continuing,
        } => control_fits(body, &b.0) && control_fits(body, &continuing.0),
        _ => false,
    })
}

/// Quads the prefix copy of a short body runs per trip of the quad loop.
pub(super) const UNROLL: u32 = 4;

/// Whether a body is short enough (in statements) that [`UNROLL`] more copies of it pay.
pub(super) fn unrolls(stmts: &[Stmt]) -> bool {
    crate::lower::loops::count_stmts(stmts) <= 48
}

/// A 32-bit value that a quad keeps in a vector whose lanes match its memory layout.
pub(super) fn four_bytes(t: &Type) -> bool {
    matches!(
        t,
        Type::Scalar(ScalarType::F32 | ScalarType::I32 | ScalarType::U32)
    )
}
