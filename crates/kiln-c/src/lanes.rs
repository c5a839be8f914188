//! Explicit lane masks for CUDA subgroup operations.
//!
//! A CUDA warp intrinsic (`__shfl_sync`, `__ballot_sync`, `__syncwarp`) takes the mask of the
//! lanes that take part, and every lane of that mask that has not exited must reach the same
//! call. `__activemask()` does not give that set: since Volta the lanes of a warp are
//! scheduled independently, and the lanes executing together at a call need not be all the
//! lanes that reach it. So kernels with subgroup operations carry the mask of their current
//! path in a variable, narrowed where the path splits:
//!
//! - at entry, the lanes of the warp that exist in the block;
//! - an `if` ballots its condition over the current mask before branching, so each branch
//!   knows its lanes;
//! - a loop keeps the mask of the lanes still iterating, narrowed by one ballot at the end of
//!   each iteration; `break` and `continue` set the loop's jump flag instead of jumping, and
//!   the statements after one that may jump run under `if (flag == 0)`, so no lane leaves a
//!   path while others still count it in;
//! - `return` from the kernel is a real return: a lane that has exited does not take part in
//!   any `_sync` intrinsic, whatever the mask says, and contributes 0 to a ballot.
//!
//! Each subgroup operation then computes its live lanes as `__ballot_sync(mask, 1)`. Device
//! functions are inlined first ([`kiln_ir::inline_calls`]); one that stays a call (it has array
//! locals) and uses subgroup operations takes the caller's mask as its first parameter, and
//! may not return before its last statement.

use crate::{err, Cx, Writer, W};
use kiln_ir::*;
use kiln_writer::{temp_name, SubgroupCall, Syntax, WriteError};
use std::fmt::Write as _;

/// The mask variables of the path being written.
pub(crate) struct Lanes {
    /// The C variable holding the mask of the current path.
    pub current: String,
    /// The jump flag of each enclosing loop, innermost last.
    pub loops: Vec<String>,
    /// Which of the kernel's device functions take the caller's mask (they use subgroup
    /// operations, directly or through calls).
    pub functions: std::rc::Rc<[bool]>,
    /// Numbers the mask and flag variables.
    next: usize,
}

impl Lanes {
    /// Tracking for a body whose current mask is the C variable `current`.
    pub fn new(current: &str, functions: std::rc::Rc<[bool]>) -> Lanes {
        Lanes {
            current: current.to_string(),
            loops: Vec::new(),
            functions,
            next: 0,
        }
    }

    /// A fresh number for mask and flag variable names.
    pub fn fresh(&mut self) -> usize {
        self.next += 1;
        self.next
    }
}

/// True when `kernel` uses a subgroup operation or barrier in its body or a device function:
/// the kernels whose CUDA source tracks lane masks.
pub(crate) fn uses_subgroups(kernel: &Kernel) -> bool {
    body_uses_subgroups(&kernel.body)
        || kernel
            .functions
            .iter()
            .any(|f| body_uses_subgroups(&f.body))
}

/// For each device function of `kernel`, whether it uses subgroup operations directly or
/// through the functions it calls.
pub(crate) fn functions_using_subgroups(kernel: &Kernel) -> Vec<bool> {
    let mut uses: Vec<bool> = kernel
        .functions
        .iter()
        .map(|f| body_uses_subgroups(&f.body))
        .collect();
    loop {
        let mut changed = false;
        for (i, f) in kernel.functions.iter().enumerate() {
            let calls_one = f.body.exprs.iter().any(|e| {
                matches!(e, Expr::Call { function, .. } if uses.get(function.0 as usize) == Some(&true))
            });
            if calls_one && !uses[i] {
                uses[i] = true;
                changed = true;
            }
        }
        if !changed {
            return uses;
        }
    }
}

fn body_uses_subgroups(body: &Body) -> bool {
    body.exprs
        .iter()
        .any(|e| matches!(e, Expr::Subgroup { .. }))
        || body
            .block
            .any(&|s| matches!(s, Stmt::Barrier(BarrierScope::Subgroup)))
}

/// True when one of `stmts`, or a statement of a block nested in them, satisfies `p`.
fn stmts_have(stmts: &[Stmt], p: &impl Fn(&Stmt) -> bool) -> bool {
    stmts.iter().any(|s| s.any(p))
}

/// True when a statement of `stmts` (nested ones included) needs the current mask: it
/// evaluates a subgroup operation, waits at a subgroup barrier or calls a function that takes
/// the mask (`functions`, as [`functions_using_subgroups`] gives). Other statements are
/// written as they are without subgroups, except that their `break` and `continue` set flags.
pub(crate) fn needs_mask(body: &Body, stmts: &[Stmt], functions: &[bool]) -> bool {
    let uses = |s: &Stmt| match s {
        Stmt::Eval(h) => match &body.exprs[h.index()] {
            Expr::Subgroup { .. } => true,
            Expr::Call { function, .. } => functions.get(function.0 as usize) == Some(&true),
            _ => false,
        },
        Stmt::Barrier(BarrierScope::Subgroup) => true,
        _ => false,
    };
    stmts_have(stmts, &uses)
}

/// True when `s` may `break` or `continue` the loop it is in (not a loop nested in it).
pub(crate) fn may_jump(s: &Stmt) -> bool {
    s.any_outside_loops(&|s| matches!(s, Stmt::Break | Stmt::Continue))
}

/// True when `body` returns anywhere but as its last top-level statement.
pub(crate) fn returns_early(body: &Body) -> bool {
    let stmts = &body.block.0;
    let inner = |s: &Stmt| matches!(s, Stmt::Return(_));
    stmts.iter().enumerate().any(|(i, s)| match s {
        Stmt::Return(_) => i + 1 < stmts.len(),
        Stmt::If { accept, reject, .. } => accept.any(&inner) || reject.any(&inner),
        Stmt::Loop { body, continuing } => body.any(&inner) || continuing.any(&inner),
        _ => false,
    })
}

impl Writer {
    /// The tracking state; only called while tracking.
    fn tracking(&mut self) -> W<&mut Lanes> {
        self.lanes
            .as_mut()
            .ok_or_else(|| WriteError("lane masks used outside lane tracking".into()))
    }

    /// The jump flag of the innermost loop, for a `break` or `continue`.
    pub(crate) fn jump_flag(&mut self) -> W<String> {
        let flag = self.tracking()?.loops.last().cloned();
        flag.ok_or_else(|| WriteError("`break` or `continue` outside a loop".into()))
    }

    fn needs_mask(&self, cx: &Cx, stmts: &[Stmt]) -> bool {
        self.lanes
            .as_ref()
            .is_some_and(|l| needs_mask(cx.body, stmts, &l.functions))
    }

    /// `stmts` with their `break`s and `continue`s setting the loop's jump flag: the
    /// statements after one that may jump run under `if (flag == 0)`, and those after a
    /// `break` or `continue` itself are never reached.
    pub(crate) fn tracked_block(
        &mut self,
        cx: &Cx,
        stmts: &[Stmt],
        out: &mut String,
        depth: usize,
    ) -> W<()> {
        for (i, s) in stmts.iter().enumerate() {
            self.stmt(cx, s, out, depth)?;
            if matches!(s, Stmt::Break | Stmt::Continue) {
                return Ok(());
            }
            if may_jump(s) && i + 1 < stmts.len() {
                let flag = self.jump_flag()?;
                let cond = format!("{flag} == 0");
                return self.tracked_branch(cx, &cond, &stmts[i + 1..], &[], out, depth);
            }
        }
        Ok(())
    }

    /// An `if` on the boolean `cond` (a handle of the body).
    pub(crate) fn tracked_if(
        &mut self,
        cx: &Cx,
        cond: Handle,
        accept: &Block,
        reject: &Block,
        out: &mut String,
        depth: usize,
    ) -> W<()> {
        let c = temp_name(cond, 0, &Type::Scalar(ScalarType::Bool));
        self.tracked_branch(cx, &c, &accept.0, &reject.0, out, depth)
    }

    /// `if (cond) { accept } else { reject }` where `cond` is a C expression. When a branch
    /// needs the mask, the condition is balloted over the current mask first, and each branch
    /// runs with its own lanes.
    fn tracked_branch(
        &mut self,
        cx: &Cx,
        cond: &str,
        accept: &[Stmt],
        reject: &[Stmt],
        out: &mut String,
        depth: usize,
    ) -> W<()> {
        let pad = "  ".repeat(depth);
        let split = self.needs_mask(cx, accept) || self.needs_mask(cx, reject);
        let lanes = self.tracking()?;
        let outer = lanes.current.clone();
        let id = lanes.fresh();
        let then = format!("kiln_then{id}");
        if split {
            let _ = writeln!(
                out,
                "{pad}const unsigned int {then} = __ballot_sync({outer}, {cond});"
            );
            self.tracking()?.current = then.clone();
        }
        let _ = writeln!(out, "{pad}if ({cond}) {{");
        self.tracked_block(cx, accept, out, depth + 1)?;
        if !reject.is_empty() {
            let _ = writeln!(out, "{pad}}} else {{");
            if split {
                let other = format!("kiln_else{id}");
                let _ = writeln!(
                    out,
                    "{pad}  const unsigned int {other} = {outer} & ~{then};"
                );
                self.tracking()?.current = other;
            }
            self.tracked_block(cx, reject, out, depth + 1)?;
        }
        let _ = writeln!(out, "{pad}}}");
        self.tracking()?.current = outer;
        Ok(())
    }

    /// A loop. One without subgroup operations is written as usual (its lanes all meet again
    /// after it); otherwise the lanes still iterating are balloted at the end of each
    /// iteration, where the lanes whose jump flag says `break` leave together.
    pub(crate) fn tracked_loop(
        &mut self,
        cx: &Cx,
        body: &Block,
        continuing: &Block,
        out: &mut String,
        depth: usize,
    ) -> W<()> {
        if !self.needs_mask(cx, &body.0) && !self.needs_mask(cx, &continuing.0) {
            let lanes = self.lanes.take();
            let written = self.plain_loop(cx, body, continuing, out, depth);
            self.lanes = lanes;
            return written;
        }
        let pad = "  ".repeat(depth);
        let lanes = self.tracking()?;
        let outer = lanes.current.clone();
        let id = lanes.fresh();
        let (iter, flag) = (format!("kiln_iter{id}"), format!("kiln_jump{id}"));
        let _ = writeln!(out, "{pad}unsigned int {iter} = {outer};");
        let _ = writeln!(out, "{pad}int {flag} = 0;");
        let first = self.open_loop(continuing, out, &pad);
        let _ = writeln!(out, "{pad}  {flag} = 0;");
        let lanes = self.tracking()?;
        lanes.current = iter.clone();
        lanes.loops.push(flag.clone());
        if continuing.0.is_empty() {
            self.tracked_block(cx, &body.0, out, depth + 1)?;
        } else {
            // Every lane of the iteration is on the same trip, so `first` is uniform.
            let _ = writeln!(out, "{pad}  if (!{first}) {{");
            self.tracked_block(cx, &continuing.0, out, depth + 2)?;
            let _ = writeln!(out, "{pad}  }}");
            match continuing.0.iter().any(may_jump) {
                true => {
                    let cond = format!("{flag} == 0");
                    self.tracked_branch(cx, &cond, &body.0, &[], out, depth + 1)?;
                }
                false => self.tracked_block(cx, &body.0, out, depth + 1)?,
            }
        }
        let _ = writeln!(
            out,
            "{pad}  {{ const unsigned int kiln_stay{id} = __ballot_sync({iter}, {flag} != 2); if ({flag} == 2) break; {iter} = kiln_stay{id}; }}"
        );
        let _ = writeln!(out, "{pad}}}");
        let lanes = self.tracking()?;
        lanes.loops.pop();
        lanes.current = outer;
        Ok(())
    }
}

impl Writer {
    pub(crate) fn subgroup(&mut self, call: SubgroupCall) -> W<String> {
        let (op, s, x) = (call.op, call.ty, call.value);
        if !self.d.has_warps() {
            return Ok(match op {
                SubgroupOp::Ballot => format!("((uint)({x} ? 1 : 0))"),
                SubgroupOp::ExclusiveAdd => self.lit(ScalarValue::zero(s)),
                _ => x.to_string(),
            });
        }
        let mask = match &self.lanes {
            Some(l) => l.current.clone(),
            None => return err("a CUDA subgroup operation outside lane tracking"),
        };
        let t = self.t(s);
        let lane = call.lane.unwrap_or("0u");
        Ok(match op {
            SubgroupOp::Shuffle | SubgroupOp::Broadcast => {
                self.shuffle("", "l < 32u", "l", s, x, lane)
            }
            SubgroupOp::ShuffleUp => self.shuffle("up_", "l <= me", "me - l", s, x, lane),
            SubgroupOp::ShuffleDown => self.shuffle("down_", "l < 32u - me", "me + l", s, x, lane),
            SubgroupOp::ShuffleXor => self.shuffle("xor_", "(me ^ l) < 32u", "me ^ l", s, x, lane),
            SubgroupOp::Ballot => format!("__ballot_sync({mask}, {x})"),
            SubgroupOp::All => format!("(__all_sync({mask}, {x}) != 0)"),
            SubgroupOp::Any => format!("(__any_sync({mask}, {x}) != 0)"),
            SubgroupOp::ReduceAdd | SubgroupOp::ReduceMin | SubgroupOp::ReduceMax => {
                // Integer sums wrap; float minimum and maximum follow kiln's NaN and
                // signed-zero rule.
                let (name, combine) = match op {
                    SubgroupOp::ReduceAdd => ("add", self.binary(BinaryOp::Add, s, "v", "o")?),
                    SubgroupOp::ReduceMin if s.is_float() => {
                        ("min", format!("{}(v, o)", self.min_max(false, s)))
                    }
                    SubgroupOp::ReduceMax if s.is_float() => {
                        ("max", format!("{}(v, o)", self.min_max(true, s)))
                    }
                    SubgroupOp::ReduceMin => ("min", "(o < v ? o : v)".to_string()),
                    _ => ("max", "(o > v ? o : v)".to_string()),
                };
                let h = format!("kiln_subgroup_{name}_{}", s.name());
                self.helper(format!("// over the active lanes: a butterfly when all 32 are active, else a tree over their ranks\nstatic __device__ __forceinline__ {t} {h}(unsigned int lanes, {t} v) {{ {ACTIVE_LANES} if (m == 0xffffffffu) {{ for (int d = 16; d > 0; d >>= 1) {{ {t} o = __shfl_xor_sync(m, v, d); v = {combine}; }} return v; }} for (unsigned int d = 1u; d < count; d <<= 1) {{ bool has = rank + d < count; {t} o = __shfl_sync(m, v, has ? __fns(m, 0u, (int)(rank + d + 1u)) : me); if (has) v = {combine}; }} return __shfl_sync(m, v, __ffs(m) - 1); }}"));
                format!("{h}({mask}, {x})")
            }
            SubgroupOp::InclusiveAdd | SubgroupOp::ExclusiveAdd => {
                let add = self.binary(BinaryOp::Add, s, "v", "o")?;
                let inclusive = op == SubgroupOp::InclusiveAdd;
                let h = format!(
                    "kiln_subgroup_{}_{}",
                    if inclusive { "inclusive" } else { "exclusive" },
                    s.name()
                );
                let last = if inclusive {
                    "return v;".to_string()
                } else {
                    format!("{t} o = __shfl_sync(m, v, rank > 0u ? __fns(m, 0u, (int)rank) : me); return rank > 0u ? o : ({t})0;")
                };
                self.helper(format!("// over the active lanes below the caller (and the caller's own when inclusive)\nstatic __device__ __forceinline__ {t} {h}(unsigned int lanes, {t} v) {{ {ACTIVE_LANES} for (unsigned int d = 1u; d < count; d <<= 1) {{ bool has = rank >= d; {t} o = __shfl_sync(m, v, has ? __fns(m, 0u, (int)(rank - d + 1u)) : me); if (has) v = {add}; }} {last} }}"));
                format!("{h}({mask}, {x})")
            }
        })
    }

    /// A call of the CUDA shuffle helper `kind` on `s`, written on first use: the source lane
    /// is `source` when `valid` holds (both in terms of the caller's lane `me` and the
    /// operand `l`), and a source lane that is outside the warp or not active keeps the
    /// caller's own value. The caller's path mask is passed along.
    pub(crate) fn shuffle(
        &mut self,
        kind: &str,
        valid: &str,
        source: &str,
        s: ScalarType,
        x: &str,
        lane: &str,
    ) -> String {
        let t = self.t(s);
        let mask = self
            .lanes
            .as_ref()
            .map_or("", |l| l.current.as_str())
            .to_string();
        let h = format!("kiln_shuffle_{kind}{}", s.name());
        self.helper(format!("static __device__ __forceinline__ {t} {h}(unsigned int lanes, {t} x, unsigned int l) {{ {ACTIVE_LANES} bool ok = {valid}; unsigned int src = ok ? {source} : me; {t} o = ({t})__shfl_sync(m, x, (int)src); return ok && ((m >> src) & 1u) ? o : x; }}"));
        format!("{h}({mask}, {x}, {lane})")
    }
}

/// The start of every CUDA subgroup helper: the active lanes `m` (those of the caller's path,
/// `lanes`, that have not returned), their `count`, the caller's lane `me` and its `rank`
/// among them.
const ACTIVE_LANES: &str = "unsigned int m = __ballot_sync(lanes, 1); unsigned int me = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u; unsigned int count = __popc(m); unsigned int rank = __popc(m & ((1u << me) - 1u)); (void)count; (void)rank;";
