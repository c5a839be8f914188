//! Property tests of control flow.
//!
//! Random kernels over `i32` locals, with `if`/`else`, counted loops whose trip counts differ
//! between work items, `loop` with `break` and `continue` under varying conditions, early
//! `return`, a private array indexed by computed values, gathers that may fall outside their
//! buffer, atomics, and (in some) shared-memory exchanges between barriers, run on every backend
//! present and must give what a plain interpreter of the same program gives, item by item.
//! Group sizes that are not multiples of four and grids with more work items than elements
//! reach the CPU backend's partial quads and its lane masks.
//!
//! `KILN_PROPTEST_CASES` sets the number of cases (default 24); the cases are the same on every
//! run unless `KILN_PROPTEST_RANDOM` is set (the run prints its seed; `KILN_PROPTEST_SEED`
//! repeats one).

use crate::common;

use kiln::ir::*;
use kiln::{Grid, LaunchArg};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The locals every program has (`v0` starts as `a[i]`, `v1` as `b[i]`, `v2` as `i`, `v3` as a
/// literal).
const LOCALS: usize = 4;
/// Elements of the private array (indices are `x & 7`, so some fall outside).
const ARRAY: u32 = 5;
/// Loops nest at most this deep (one counter each).
const DEPTH: usize = 4;
/// Trips of a `loop` before its built-in exit.
const LOOP_TRIPS: u32 = 5;
/// Bins of the atomic histogram.
const BINS: u32 = 16;
/// The largest group size tested (the shared tile's length).
const MAX_GROUP: u32 = 64;

#[derive(Clone, Copy, Debug)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    Min,
    Max,
}

#[derive(Clone, Copy, Debug)]
enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

/// An `i32` expression.
#[derive(Clone, Debug)]
enum X {
    Local(usize),
    Lit(i32),
    /// `a[i]`, zero past the end.
    A,
    /// `b[i]`, zero past the end.
    B,
    /// `a[x & 63]`, zero past the end.
    Gather(Box<X>),
    /// The global index `i`.
    Index,
    /// The local index within the group.
    LocalIndex,
    /// The round of a program with barriers that repeats its phases ([`Program::rounds`]),
    /// counted by a local the whole group shares; 0 in other programs.
    Round,
    /// The counter of loop nesting level `d`.
    Counter(usize),
    /// The private array at `x & 7`.
    Array(Box<X>),
    /// The local of the innermost enclosing [`S::Let`]; 0 outside any.
    Temp,
    /// The program's device function of two arguments ([`Program::function`]).
    Call(Box<X>, Box<X>),
    Bin(Op, Box<X>, Box<X>),
    Select(Box<C>, Box<X>, Box<X>),
}

/// A condition.
#[derive(Clone, Debug)]
enum C {
    Cmp(Cmp, X, X),
    Not(Box<C>),
    And(Box<C>, Box<C>),
    Or(Box<C>, Box<C>),
}

/// A statement.
#[derive(Clone, Debug)]
enum S {
    Set(usize, X),
    /// The private array at `x & 7` (skipped past its end) takes a value.
    SetArray(X, X),
    If(C, Vec<S>, Vec<S>),
    /// `for j in 0..(x & 7)`, the counter of its level set to `j` on each trip.
    For(X, Vec<S>),
    /// `loop`, left after [`LOOP_TRIPS`] trips (counted by its level's counter) or by a `break`.
    Loop(Vec<S>),
    /// `for k in span { v3 ^= k; body }` over `i32`s near the type's extremes, its level's
    /// counter holding the trip's number: Rust's own ranges are the reference.
    Span(Span, Vec<S>),
    /// `if c { break }`; nothing outside a loop.
    Break(C),
    /// `if c { continue }`; nothing outside a loop.
    Continue(C),
    /// `if c { return }`; nothing in programs with barriers.
    Return(C),
    /// `mid[i] = x`.
    Store(X),
    /// `hist[x & 15] += 1`, atomically.
    Count(X),
    /// `for j in 0..trips { v += a[i * stride + j] }` for local `v`, with constant `trips` and
    /// `stride`: reads that pass `a`'s end on the later trips of the later work items.
    Sweep(usize, u32, u32),
    /// A local declared here, holding `x`, that [`X::Temp`] reads in the block.
    Let(X, Vec<S>),
    /// The innermost enclosing [`S::Let`]'s local takes a value (nothing outside any).
    SetTemp(X),
}

/// `(start..end).step_by(step)` or `(start..=end).step_by(step)`, with its ends and step
/// constants or values known only at run time (which take another loop shape in kiln).
#[derive(Clone, Copy, Debug)]
struct Span {
    start: i32,
    end: i32,
    step: i32,
    inclusive: bool,
    at_run_time: bool,
}

impl Span {
    /// The values Rust's range visits.
    fn values(&self) -> Vec<i32> {
        let step = self.step as usize;
        match self.inclusive {
            true => (self.start..=self.end).step_by(step).collect(),
            false => (self.start..self.end).step_by(step).collect(),
        }
    }
}

/// Spans whose ends lie near `i32::MIN`, -1, 0 or `i32::MAX`, with steps from 1 to
/// `i32::MAX` but never more than 40 trips.
fn span() -> impl Strategy<Value = Span> {
    let anchor = proptest::sample::select(vec![i32::MIN, -1, 0, i32::MAX]);
    (
        anchor.clone(),
        -20i32..21,
        anchor,
        -20i32..21,
        proptest::sample::select(vec![1i32, 2, 3, 7, 1 << 30, i32::MAX]),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(a, da, b, db, step, inclusive, at_run_time)| {
            let (start, end) = (a.saturating_add(da), b.saturating_add(db));
            let span = (end as i64 - start as i64).max(0);
            let step = (step as i64).max(span / 40 + 1).min(i32::MAX as i64) as i32;
            Span {
                start,
                end,
                step,
                inclusive,
                at_run_time,
            }
        })
}

/// A program: statements run by every work item; with barriers, each phase after the first
/// starts by passing `v0` to the work item `shift` places along in the group through shared
/// memory, which it xors into its `v1`.
#[derive(Clone, Debug)]
struct Program {
    init: i32,
    phases: Vec<Vec<S>>,
    /// The body of `f(x, y)`, a device function the phases may call: its locals start as
    /// `x`, `y`, 0 and 0, it reads no memory, its `return` returns its first local, and so
    /// does its end.
    function: Vec<S>,
    shift: u32,
    guard: Guard,
    /// With barriers and more than 0: the phases run this many times over, in a loop whose
    /// counter [`X::Round`] reads.
    rounds: u32,
}

/// How the work items past the `n` elements are kept from them (programs without barriers).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Guard {
    /// `if i < n { .. }` around the body.
    If,
    /// `if i >= n { return }` first.
    Return,
    /// None: they run, reading zeros and skipping stores past the ends.
    Unguarded,
}

fn op() -> impl Strategy<Value = Op> {
    proptest::sample::select(vec![
        Op::Add,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::Rem,
        Op::And,
        Op::Or,
        Op::Xor,
        Op::Shl,
        Op::Shr,
        Op::Min,
        Op::Max,
    ])
}

fn cmp() -> impl Strategy<Value = Cmp> {
    proptest::sample::select(vec![Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge, Cmp::Eq, Cmp::Ne])
}

fn literal() -> impl Strategy<Value = i32> {
    prop_oneof![
        3 => -8i32..9,
        1 => proptest::sample::select(vec![i32::MIN, i32::MAX, -1, 31, 33, 63, 1000]),
        1 => any::<i32>(),
    ]
}

fn expr() -> BoxedStrategy<X> {
    let leaf = prop_oneof![
        3 => (0..LOCALS).prop_map(X::Local),
        2 => literal().prop_map(X::Lit),
        1 => Just(X::A),
        1 => Just(X::B),
        1 => Just(X::Index),
        1 => Just(X::LocalIndex),
        1 => Just(X::Round),
        2 => (0..DEPTH).prop_map(X::Counter),
        2 => Just(X::Temp),
    ];
    leaf.prop_recursive(3, 12, 2, |inner| {
        let cond = (cmp(), inner.clone(), inner.clone()).prop_map(|(o, a, b)| C::Cmp(o, a, b));
        prop_oneof![
            4 => (op(), inner.clone(), inner.clone())
                .prop_map(|(o, a, b)| X::Bin(o, Box::new(a), Box::new(b))),
            1 => inner.clone().prop_map(|x| X::Gather(Box::new(x))),
            1 => inner.clone().prop_map(|x| X::Array(Box::new(x))),
            1 => (inner.clone(), inner.clone())
                .prop_map(|(x, y)| X::Call(Box::new(x), Box::new(y))),
            1 => (cond, inner.clone(), inner)
                .prop_map(|(c, a, b)| X::Select(Box::new(c), Box::new(a), Box::new(b))),
        ]
    })
    .boxed()
}

fn cond() -> BoxedStrategy<C> {
    let leaf = (cmp(), expr(), expr()).prop_map(|(o, a, b)| C::Cmp(o, a, b));
    leaf.prop_recursive(2, 4, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|c| C::Not(Box::new(c))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| C::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner).prop_map(|(a, b)| C::Or(Box::new(a), Box::new(b))),
        ]
    })
    .boxed()
}

fn statement() -> BoxedStrategy<S> {
    let simple = prop_oneof![
        6 => ((0..LOCALS), expr()).prop_map(|(v, x)| S::Set(v, x)),
        1 => (expr(), expr()).prop_map(|(i, x)| S::SetArray(i, x)),
        2 => cond().prop_map(S::Break),
        1 => cond().prop_map(S::Continue),
        1 => cond().prop_map(S::Return),
        1 => expr().prop_map(S::Store),
        1 => expr().prop_map(S::Count),
        1 => ((0..LOCALS), 1..5u32, 1..9u32).prop_map(|(v, s, t)| S::Sweep(v, s, t)),
        2 => expr().prop_map(S::SetTemp),
    ];
    simple
        .prop_recursive(3, 24, 4, |inner| {
            let block = || proptest::collection::vec(inner.clone(), 1..4);
            prop_oneof![
                (
                    cond(),
                    block(),
                    proptest::collection::vec(inner.clone(), 0..3)
                )
                    .prop_map(|(c, t, e)| S::If(c, t, e)),
                (expr(), block()).prop_map(|(x, b)| S::For(x, b)),
                (span(), block()).prop_map(|(r, b)| S::Span(r, b)),
                block().prop_map(S::Loop),
                (expr(), block()).prop_map(|(x, b)| S::Let(x, b)),
            ]
        })
        .boxed()
}

fn program() -> impl Strategy<Value = Program> {
    let phases = prop_oneof![
        3 => proptest::collection::vec(statement(), 1..6).prop_map(|b| vec![b]),
        1 => proptest::collection::vec(proptest::collection::vec(statement(), 1..4), 2..4),
    ];
    let guard = proptest::sample::select(vec![Guard::If, Guard::Return, Guard::Unguarded]);
    let shape = proptest::sample::select(vec![Shape::Any, Shape::Quads, Shape::UniformLoops]);
    let function = proptest::collection::vec(statement(), 0..4);
    (
        literal(),
        phases,
        function,
        1..MAX_GROUP,
        guard,
        shape,
        0..4u32,
    )
        .prop_map(
            |(init, phases, function, shift, guard, shape, rounds)| Program {
                init,
                phases: phases.iter().map(|b| reshaped(b, shape, false)).collect(),
                function: function_body(&function),
                shift,
                guard,
                rounds,
            },
        )
}

/// `x` made the same for every work item: locals become loop counters (which are, in a
/// program whose loops all run the same trips everywhere), per-item inputs literals.
fn uniform(x: &X) -> X {
    let b = |x: &X| Box::new(uniform(x));
    match x {
        X::Local(v) => X::Counter(*v % DEPTH),
        X::A | X::Index => X::Lit(3),
        X::B | X::LocalIndex => X::Lit(-2),
        X::Lit(_) | X::Counter(_) | X::Round => x.clone(),
        X::Temp => X::Lit(1),
        X::Call(x, y) => X::Call(b(x), b(y)),
        X::Gather(x) => X::Gather(b(x)),
        X::Array(x) => uniform(x),
        X::Bin(o, x, y) => X::Bin(*o, b(x), b(y)),
        X::Select(c, x, y) => X::Select(Box::new(uniform_cond(c)), b(x), b(y)),
    }
}

fn uniform_cond(c: &C) -> C {
    map_cond(c, &uniform)
}

/// `c` with `f` applied to each of its expressions.
fn map_cond(c: &C, f: &dyn Fn(&X) -> X) -> C {
    match c {
        C::Cmp(o, x, y) => C::Cmp(*o, f(x), f(y)),
        C::Not(c) => C::Not(Box::new(map_cond(c, f))),
        C::And(a, b) => C::And(Box::new(map_cond(a, f)), Box::new(map_cond(b, f))),
        C::Or(a, b) => C::Or(Box::new(map_cond(a, f)), Box::new(map_cond(b, f))),
    }
}

/// `x` without reads of the private array (each replaced by its index expression).
fn without_array(x: &X) -> X {
    let b = |x: &X| Box::new(without_array(x));
    match x {
        X::Array(x) => without_array(x),
        X::Gather(x) => X::Gather(b(x)),
        X::Call(x, y) => X::Call(b(x), b(y)),
        X::Bin(o, x, y) => X::Bin(*o, b(x), b(y)),
        X::Select(c, x, y) => X::Select(Box::new(map_cond(c, &without_array)), b(x), b(y)),
        _ => x.clone(),
    }
}

/// `x` as a device function may compute it: without memory, built-ins or calls.
fn pure(x: &X) -> X {
    let b = |x: &X| Box::new(pure(x));
    match x {
        X::A | X::Index => X::Lit(5),
        X::B | X::LocalIndex => X::Lit(-3),
        X::Round => X::Lit(7),
        X::Gather(x) | X::Array(x) => pure(x),
        X::Call(x, y) => X::Bin(Op::Xor, b(x), b(y)),
        X::Bin(o, x, y) => X::Bin(*o, b(x), b(y)),
        X::Select(c, x, y) => X::Select(Box::new(map_cond(c, &pure)), b(x), b(y)),
        X::Local(_) | X::Lit(_) | X::Counter(_) | X::Temp => x.clone(),
    }
}

/// `block` as the body of the program's device function: pure expressions, no stores or
/// atomics, no private array.
fn function_body(block: &[S]) -> Vec<S> {
    let c = |c: &C| map_cond(c, &pure);
    block
        .iter()
        .filter_map(|s| {
            Some(match s {
                S::Set(v, x) => S::Set(*v, pure(x)),
                S::SetArray(..) | S::Store(_) | S::Count(_) | S::Sweep(..) => return None,
                S::If(k, t, e) => S::If(c(k), function_body(t), function_body(e)),
                S::For(x, b) => S::For(pure(x), function_body(b)),
                S::Span(r, b) => S::Span(*r, function_body(b)),
                S::Loop(b) => S::Loop(function_body(b)),
                S::Break(k) => S::Break(c(k)),
                S::Continue(k) => S::Continue(c(k)),
                S::Return(k) => S::Return(c(k)),
                S::Let(x, b) => S::Let(pure(x), function_body(b)),
                S::SetTemp(x) => S::SetTemp(pure(x)),
            })
        })
        .collect()
}

/// Whether `block` holds a loop, `break` or `continue` at any depth.
fn has_loop_control(block: &[S]) -> bool {
    block.iter().any(|s| match s {
        S::For(..) | S::Span(..) | S::Loop(_) | S::Break(_) | S::Continue(_) => true,
        S::If(_, t, e) => has_loop_control(t) || has_loop_control(e),
        S::Let(_, b) => has_loop_control(b),
        _ => false,
    })
}

/// Which programs a case runs: the CPU backend runs four work items at a time (in quads)
/// kernels without private arrays and atomics, and has two forms of loops, depending on
/// whether all four leave each iteration together.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    /// As generated: with private arrays and atomics, one work item at a time on the CPU.
    Any,
    /// No private arrays or atomics; loops whose work items leave at different times.
    Quads,
    /// No private arrays or atomics, and every loop runs the same trips in all work items
    /// that enter it and is left by all together: trip counts and the conditions of `break`,
    /// `continue`, and of an `if` around any of those inside a loop, are uniform, and no
    /// `return` is inside a loop. Conditions of other `if`s (around loops too) and of
    /// `return`s still vary.
    UniformLoops,
}

/// `block` reshaped to `shape`.
fn reshaped(block: &[S], shape: Shape, in_loop: bool) -> Vec<S> {
    let uniform_loops = shape == Shape::UniformLoops;
    let loop_cond = |c: &C| match uniform_loops {
        true => uniform_cond(c),
        false => map_cond(c, &without_array),
    };
    let mut out = Vec::new();
    for s in block {
        out.push(match s {
            _ if shape == Shape::Any => s.clone(),
            S::Set(v, x) => S::Set(*v, without_array(x)),
            S::Store(x) => S::Store(without_array(x)),
            S::Sweep(..) => s.clone(),
            S::SetArray(..) | S::Count(_) => continue,
            S::If(c, t, e) => {
                let (t, e) = (reshaped(t, shape, in_loop), reshaped(e, shape, in_loop));
                let c = match in_loop && (has_loop_control(&t) || has_loop_control(&e)) {
                    true => loop_cond(c),
                    false => map_cond(c, &without_array),
                };
                S::If(c, t, e)
            }
            S::For(x, b) if uniform_loops => S::For(uniform(x), reshaped(b, shape, true)),
            S::For(x, b) => S::For(without_array(x), reshaped(b, shape, true)),
            S::Loop(b) => S::Loop(reshaped(b, shape, true)),
            S::Span(r, b) => S::Span(*r, reshaped(b, shape, true)),
            S::Let(x, b) => S::Let(without_array(x), reshaped(b, shape, in_loop)),
            S::SetTemp(x) => S::SetTemp(without_array(x)),
            S::Break(c) => S::Break(loop_cond(c)),
            S::Continue(c) => S::Continue(loop_cond(c)),
            S::Return(_) if in_loop && uniform_loops => continue,
            S::Return(c) => S::Return(map_cond(c, &without_array)),
        });
    }
    out
}

fn compare(o: Cmp, a: i32, b: i32) -> bool {
    match o {
        Cmp::Lt => a < b,
        Cmp::Le => a <= b,
        Cmp::Gt => a > b,
        Cmp::Ge => a >= b,
        Cmp::Eq => a == b,
        Cmp::Ne => a != b,
    }
}

/// kiln's integer rules (README, Semantics): wrapping arithmetic, `x / 0 = x`, `x % 0 = 0`,
/// `MIN / -1 = MIN`, shift amounts modulo 32.
/// `a o b` in the IR (what [`apply`] computes on the host).
fn binary_op(o: Op, a: Val<i32>, b: Val<i32>) -> Val<i32> {
    match o {
        Op::Add => a + b,
        Op::Sub => a - b,
        Op::Mul => a * b,
        Op::Div => a / b,
        Op::Rem => a % b,
        Op::And => a & b,
        Op::Or => a | b,
        Op::Xor => a ^ b,
        Op::Shl => a << b,
        Op::Shr => a >> b,
        Op::Min => a.min(b),
        Op::Max => a.max(b),
    }
}

/// `a o b` in the IR (what [`compare`] computes on the host).
fn compare_op(o: Cmp, a: Val<i32>, b: Val<i32>) -> Val<bool> {
    match o {
        Cmp::Lt => a.lt(b),
        Cmp::Le => a.le(b),
        Cmp::Gt => a.gt(b),
        Cmp::Ge => a.ge(b),
        Cmp::Eq => a.eq(b),
        Cmp::Ne => a.ne(b),
    }
}

fn apply(o: Op, a: i32, b: i32) -> i32 {
    match o {
        Op::Add => a.wrapping_add(b),
        Op::Sub => a.wrapping_sub(b),
        Op::Mul => a.wrapping_mul(b),
        Op::Div if b == 0 => a,
        Op::Div => a.wrapping_div(b),
        Op::Rem if b == 0 => 0,
        Op::Rem => a.wrapping_rem(b),
        Op::And => a & b,
        Op::Or => a | b,
        Op::Xor => a ^ b,
        Op::Shl => a.wrapping_shl(b as u32),
        Op::Shr => a.wrapping_shr(b as u32),
        Op::Min => a.min(b),
        Op::Max => a.max(b),
    }
}

/// What leaves a block early.
#[derive(Clone, Copy, PartialEq)]
enum Flow {
    Next,
    Break,
    Continue,
    Return,
}

/// One work item's state in the interpreter.
struct Item<'a> {
    i: u32,
    l: u32,
    round: u32,
    a: &'a [i32],
    b: &'a [i32],
    locals: [i32; LOCALS],
    array: [i32; ARRAY as usize],
    counters: [u32; DEPTH],
    temps: Vec<i32>,
    /// The program's device function.
    function: &'a [S],
    mid: &'a mut [i32],
    hist: &'a mut [i32],
    barriers: bool,
}

impl Item<'_> {
    fn eval(&self, x: &X) -> i32 {
        let at = |v: &[i32], i: u32| v.get(i as usize).copied().unwrap_or(0);
        match x {
            X::Local(v) => self.locals[*v],
            X::Lit(c) => *c,
            X::A => at(self.a, self.i),
            X::B => at(self.b, self.i),
            X::Gather(x) => at(self.a, (self.eval(x) & 63) as u32),
            X::Index => self.i as i32,
            X::LocalIndex => self.l as i32,
            X::Round => self.round as i32,
            X::Counter(d) => self.counters[*d] as i32,
            X::Array(x) => at(&self.array, (self.eval(x) & 7) as u32),
            X::Temp => self.temps.last().copied().unwrap_or(0),
            X::Call(x, y) => call(self.function, self.eval(x), self.eval(y)),
            X::Bin(o, a, b) => apply(*o, self.eval(a), self.eval(b)),
            X::Select(c, a, b) => {
                if self.test(c) {
                    self.eval(a)
                } else {
                    self.eval(b)
                }
            }
        }
    }

    fn test(&self, c: &C) -> bool {
        match c {
            C::Cmp(o, a, b) => compare(*o, self.eval(a), self.eval(b)),
            C::Not(c) => !self.test(c),
            C::And(a, b) => self.test(a) & self.test(b),
            C::Or(a, b) => self.test(a) | self.test(b),
        }
    }

    /// Runs one trip of the body of a loop inside `loops` others; returns how the loop ends
    /// when it ends there (`Next` after a `break`).
    fn trip(&mut self, body: &[S], loops: usize) -> Option<Flow> {
        match self.run(body, loops + 1) {
            Flow::Break => Some(Flow::Next),
            Flow::Return => Some(Flow::Return),
            _ => None,
        }
    }

    /// Runs `block` inside `loops` enclosing loops.
    fn run(&mut self, block: &[S], loops: usize) -> Flow {
        for s in block {
            let flow = match s {
                S::Set(v, x) => {
                    self.locals[*v] = self.eval(x);
                    Flow::Next
                }
                S::SetArray(i, x) => {
                    let (i, x) = ((self.eval(i) & 7) as usize, self.eval(x));
                    if let Some(slot) = self.array.get_mut(i) {
                        *slot = x;
                    }
                    Flow::Next
                }
                S::If(c, t, e) => {
                    if self.test(c) {
                        self.run(t, loops)
                    } else {
                        self.run(e, loops)
                    }
                }
                S::For(x, body) if loops < DEPTH => {
                    let trips = (self.eval(x) & 7) as u32;
                    (0..trips)
                        .find_map(|j| {
                            self.counters[loops] = j;
                            self.trip(body, loops)
                        })
                        .unwrap_or(Flow::Next)
                }
                S::Loop(body) if loops < DEPTH => {
                    self.counters[loops] = 0;
                    let mut flow = Flow::Next;
                    while self.counters[loops] < LOOP_TRIPS {
                        self.counters[loops] += 1;
                        if let Some(end) = self.trip(body, loops) {
                            flow = end;
                            break;
                        }
                    }
                    flow
                }
                S::Span(r, body) if loops < DEPTH => r
                    .values()
                    .into_iter()
                    .enumerate()
                    .find_map(|(j, k)| {
                        self.counters[loops] = j as u32;
                        self.locals[3] ^= k;
                        self.trip(body, loops)
                    })
                    .unwrap_or(Flow::Next),
                S::For(_, body) | S::Loop(body) | S::Span(_, body) => self.run(body, loops),
                S::Break(c) if loops > 0 && self.test(c) => Flow::Break,
                S::Continue(c) if loops > 0 && self.test(c) => Flow::Continue,
                S::Return(c) if !self.barriers && self.test(c) => Flow::Return,
                S::Break(_) | S::Continue(_) | S::Return(_) => Flow::Next,
                S::Store(x) => {
                    let x = self.eval(x);
                    if let Some(slot) = self.mid.get_mut(self.i as usize) {
                        *slot = x;
                    }
                    Flow::Next
                }
                S::Count(x) => {
                    self.hist[(self.eval(x) & 15) as usize] += 1;
                    Flow::Next
                }
                S::Sweep(v, stride, trips) => {
                    for j in 0..*trips {
                        let at = self.i.wrapping_mul(*stride).wrapping_add(j);
                        let x = self.a.get(at as usize).copied().unwrap_or(0);
                        self.locals[*v] = self.locals[*v].wrapping_add(x);
                    }
                    Flow::Next
                }
                S::Let(x, body) => {
                    let x = self.eval(x);
                    self.temps.push(x);
                    let flow = self.run(body, loops);
                    self.temps.pop();
                    flow
                }
                S::SetTemp(x) => {
                    let x = self.eval(x);
                    if let Some(t) = self.temps.last_mut() {
                        *t = x;
                    }
                    Flow::Next
                }
            };
            if flow != Flow::Next {
                return flow;
            }
        }
        Flow::Next
    }
}

/// The interpreter's device function: `body` with locals `x`, `y`, 0, 0, returning its first
/// local at a `return` or at the end.
fn call(body: &[S], x: i32, y: i32) -> i32 {
    let mut item = Item {
        i: 0,
        l: 0,
        round: 0,
        a: &[],
        b: &[],
        locals: [x, y, 0, 0],
        array: [0; ARRAY as usize],
        counters: [0; DEPTH],
        temps: Vec::new(),
        function: &[],
        mid: &mut [],
        hist: &mut [],
        barriers: false,
    };
    item.run(body, 0);
    item.locals[0]
}

/// What a program leaves in its outputs: each item's locals at the end (`out`, four per
/// item), the last value each stored (`mid`) and the histogram.
#[derive(Debug, PartialEq)]
struct Outputs {
    out: Vec<i32>,
    mid: Vec<i32>,
    hist: Vec<i32>,
}

/// The value `mid` holds for items that store nothing.
const UNSTORED: i32 = 0x5A5A_5A5A;

/// What a work item keeps between the phases of a program with barriers.
struct Kept {
    locals: [i32; LOCALS],
    array: [i32; ARRAY as usize],
    counters: [u32; DEPTH],
    /// False once it returned (or when its guard keeps it from the elements).
    running: bool,
}

/// The interpreter: `p` over `a` and `b` on `groups` groups of `size` work items.
fn interpret(p: &Program, a: &[i32], b: &[i32], groups: u32, size: u32) -> Outputs {
    let n = a.len();
    let mut out = vec![0; 4 * n];
    let mut mid = vec![UNSTORED; n];
    let mut hist = vec![0; BINS as usize];
    let barriers = p.phases.len() > 1;
    for g in 0..groups {
        let mut items: Vec<Kept> = (0..size)
            .map(|l| {
                let i = (g * size + l) as usize;
                let at = |v: &[i32]| v.get(i).copied().unwrap_or(0);
                Kept {
                    locals: [at(a), at(b), i as i32, p.init],
                    array: [0; ARRAY as usize],
                    counters: [0; DEPTH],
                    running: barriers || p.guard == Guard::Unguarded || i < n,
                }
            })
            .collect();
        let rounds = if barriers { p.rounds.max(1) } else { 1 };
        for round in 0..rounds {
            for (phase, block) in p.phases.iter().enumerate() {
                if phase > 0 {
                    let tile: Vec<i32> = items.iter().map(|s| s.locals[0]).collect();
                    for (l, s) in items.iter_mut().enumerate() {
                        s.locals[1] ^= tile[(l + p.shift as usize) % size as usize];
                    }
                }
                for (l, s) in items.iter_mut().enumerate() {
                    if !s.running {
                        continue;
                    }
                    let mut item = Item {
                        i: g * size + l as u32,
                        l: l as u32,
                        round,
                        a,
                        b,
                        locals: s.locals,
                        array: s.array,
                        counters: s.counters,
                        temps: Vec::new(),
                        function: &p.function,
                        mid: &mut mid,
                        hist: &mut hist,
                        barriers,
                    };
                    let flow = item.run(block, 0);
                    (s.locals, s.array, s.counters) = (item.locals, item.array, item.counters);
                    s.running &= flow != Flow::Return;
                }
            }
        }
        for (l, s) in items.iter().enumerate() {
            let i = (g * size) as usize + l;
            if s.running {
                for (j, v) in s.locals.iter().enumerate() {
                    if let Some(slot) = out.get_mut(4 * i + j) {
                        *slot = *v;
                    }
                }
            }
        }
    }
    Outputs { out, mid, hist }
}

/// The kernel's view of the program's state while it is built.
struct Build {
    a: Mem<i32>,
    b: Mem<i32>,
    mid: Mem<i32>,
    hist: Mem<i32>,
    i: Val<u32>,
    locals: Vec<Var<i32>>,
    /// The private array (none in the device function, which uses no array).
    array: Option<LocalArray<i32>>,
    counters: Vec<Var<u32>>,
    /// The round counter ([`X::Round`]; none in the device function, which never reads it).
    round: Option<Var<u32>>,
    /// The locals of the enclosing [`S::Let`]s, innermost last.
    temps: std::cell::RefCell<Vec<Var<i32>>>,
    barriers: bool,
    /// The program's device function; `None` while building it, where `return` returns the
    /// first local.
    function: Option<DeviceFn<i32>>,
}

impl Build {
    fn expr(&self, x: &X) -> Val<i32> {
        match x {
            X::Local(v) => self.locals[*v].get(),
            X::Lit(c) => lit(*c),
            X::A => self.a.load(self.i),
            X::B => self.b.load(self.i),
            X::Gather(x) => self.a.load((self.expr(x) & 63).cast::<u32>()),
            X::Index => self.i.cast::<i32>(),
            X::LocalIndex => local_id(Axis::X).cast::<i32>(),
            X::Round => match &self.round {
                Some(r) => r.get().cast::<i32>(),
                None => build_error("the device function reads no round".into()),
            },
            X::Counter(d) => self.counters[*d].get().cast::<i32>(),
            X::Array(x) => match self.array {
                Some(array) => array.get((self.expr(x) & 7).cast::<u32>()),
                None => build_error("the device function has no private array".into()),
            },
            X::Call(x, y) => match &self.function {
                Some(f) => f.call(&[self.expr(x).erase(), self.expr(y).erase()]),
                None => build_error("the device function calls itself".into()),
            },
            X::Temp => match self.temps.borrow().last() {
                Some(t) => t.get(),
                None => lit(0),
            },
            X::Bin(o, a, b) => binary_op(*o, self.expr(a), self.expr(b)),
            X::Select(c, a, b) => select(self.cond(c), self.expr(a), self.expr(b)),
        }
    }

    fn cond(&self, c: &C) -> Val<bool> {
        match c {
            C::Cmp(o, a, b) => compare_op(*o, self.expr(a), self.expr(b)),
            C::Not(c) => self.cond(c).not(),
            C::And(a, b) => self.cond(a).and(self.cond(b)),
            C::Or(a, b) => self.cond(a).or(self.cond(b)),
        }
    }

    fn block(&self, block: &[S], loops: usize) {
        for s in block {
            match s {
                S::Set(v, x) => self.locals[*v].set(self.expr(x)),
                S::SetArray(i, x) => {
                    let i = (self.expr(i) & 7).cast::<u32>();
                    match self.array {
                        Some(array) => array.set(i, self.expr(x)),
                        None => record_error("the device function has no private array".into()),
                    }
                }
                S::If(c, t, e) if e.is_empty() => if_then(self.cond(c), || self.block(t, loops)),
                S::If(c, t, e) => if_else(
                    self.cond(c),
                    || self.block(t, loops),
                    || self.block(e, loops),
                ),
                S::For(x, body) if loops < DEPTH => {
                    let trips = (self.expr(x) & 7).cast::<u32>();
                    let counter = self.counters[loops];
                    for_range(0u32, trips, |j| {
                        counter.set(j);
                        self.block(body, loops + 1);
                    });
                }
                S::Loop(body) if loops < DEPTH => {
                    let counter = self.counters[loops];
                    counter.set(0u32);
                    loop_(|| {
                        if_then(counter.get().ge(LOOP_TRIPS), break_);
                        counter.set(counter.get() + 1u32);
                        self.block(body, loops + 1);
                    });
                }
                S::Span(r, body) if loops < DEPTH => {
                    let counter = self.counters[loops];
                    // The trip's number, counted before the body (which may `continue`).
                    let trip = Var::new("span_trip", 0u32);
                    // Read from locals, the ends and step are values kiln sees only at run time.
                    let at = |v: i32| match r.at_run_time {
                        true => Var::new("span_end", v).get(),
                        false => lit(v),
                    };
                    let (start, end, step) = (at(r.start), at(r.end), at(r.step));
                    let visit = |k: Val<i32>| {
                        counter.set(trip.get());
                        trip.set(trip.get() + 1u32);
                        let v3 = self.locals[3];
                        v3.set(v3.get() ^ k);
                        self.block(body, loops + 1);
                    };
                    match r.inclusive {
                        true => for_range_inclusive_step(start, end, step, visit),
                        false => for_range_step(start, end, step, visit),
                    }
                }
                S::For(_, body) | S::Loop(body) | S::Span(_, body) => self.block(body, loops),
                S::Break(c) if loops > 0 => if_then(self.cond(c), break_),
                S::Continue(c) if loops > 0 => if_then(self.cond(c), continue_),
                S::Return(c) if self.function.is_none() => {
                    let first = self.locals[0];
                    if_then(self.cond(c), || return_value(first.get()))
                }
                S::Return(c) if !self.barriers => if_then(self.cond(c), return_),
                S::Break(_) | S::Continue(_) | S::Return(_) => {}
                S::Store(x) => self.mid.store(self.i, self.expr(x)),
                S::Count(x) => {
                    self.hist
                        .atomic_add((self.expr(x) & 15).cast::<u32>(), 1i32);
                }
                S::Sweep(v, stride, trips) => {
                    let (local, i, stride) = (self.locals[*v], self.i, *stride);
                    for_range(0u32, *trips, |j| {
                        local.set(local.get() + self.a.load(i * stride + j))
                    });
                }
                S::Let(x, body) => {
                    let t = Var::new("t", self.expr(x));
                    self.temps.borrow_mut().push(t);
                    self.block(body, loops);
                    self.temps.borrow_mut().pop();
                }
                S::SetTemp(x) => {
                    let x = self.expr(x);
                    if let Some(t) = self.temps.borrow().last() {
                        t.set(x);
                    }
                }
            }
        }
    }
}

fn kernel(p: &Program) -> Result<Kernel, IrError> {
    Kernel::build("program", |k| {
        let a = k.buffer::<i32>("a", Access::Read);
        let b = k.buffer::<i32>("b", Access::Read);
        let out = k.buffer::<i32>("out", Access::Write);
        let mid = k.buffer::<i32>("mid", Access::ReadWrite);
        let hist = k.buffer::<i32>("hist", Access::ReadWrite);
        let tile = k.shared::<i32>("tile", SharedLen::Static(MAX_GROUP));
        let n = k.value::<u32>("n");
        let i = global_id(Axis::X);
        let barriers = p.phases.len() > 1;
        let int = || ("x", Type::Scalar(ScalarType::I32));
        let f = device_fn::<i32>(
            "f",
            &[int(), ("y", Type::Scalar(ScalarType::I32))],
            false,
            |xy| {
                let s = Build {
                    a,
                    b,
                    mid,
                    hist,
                    i: lit(0u32),
                    locals: vec![
                        Var::new("v0", xy[0].typed::<i32>()),
                        Var::new("v1", xy[1].typed::<i32>()),
                        Var::new("v2", 0i32),
                        Var::new("v3", 0i32),
                    ],
                    array: None,
                    counters: (0..DEPTH)
                        .map(|d| Var::new(&format!("c{d}"), 0u32))
                        .collect(),
                    round: None,
                    temps: Default::default(),
                    barriers: false,
                    function: None,
                };
                s.block(&p.function, 0);
                s.locals[0].get()
            },
        );
        let s = Build {
            a,
            b,
            mid,
            hist,
            i,
            locals: vec![
                Var::new("v0", a.load(i)),
                Var::new("v1", b.load(i)),
                Var::new("v2", i.cast::<i32>()),
                Var::new("v3", p.init),
            ],
            array: Some(LocalArray::new("array", ARRAY)),
            counters: (0..DEPTH)
                .map(|d| Var::new(&format!("c{d}"), 0u32))
                .collect(),
            round: Some(Var::new("round", 0u32)),
            temps: Default::default(),
            barriers,
            function: Some(f),
        };
        let phases = || {
            for (phase, block) in p.phases.iter().enumerate() {
                if phase > 0 {
                    let l = local_id(Axis::X);
                    barrier();
                    tile.store(l, s.locals[0].get());
                    barrier();
                    let from = (l + p.shift) % group_size(Axis::X);
                    s.locals[1].set(s.locals[1].get() ^ tile.load(from));
                }
                s.block(block, 0);
            }
        };
        let body = || {
            match (&s.round, barriers && p.rounds > 0) {
                (Some(round), true) => loop_(|| {
                    if_then(round.get().ge(p.rounds), break_);
                    phases();
                    round.set(round.get() + 1u32);
                }),
                _ => phases(),
            }
            for (j, v) in s.locals.iter().enumerate() {
                out.store(i * 4u32 + j as u32, v.get());
            }
        };
        match p.guard {
            _ if barriers => body(),
            Guard::If => if_then(i.lt(n), body),
            Guard::Return => {
                if_then(i.ge(n), return_);
                body();
            }
            Guard::Unguarded => body(),
        }
    })
}

fn run_on(
    c: &kiln::Context,
    k: &Kernel,
    a: &[i32],
    b: &[i32],
    grid: &Grid,
) -> Result<Outputs, kiln::Error> {
    let n = a.len();
    let mut out = vec![0i32; 4 * n];
    let mut mid = vec![UNSTORED; n];
    let mut hist = vec![0i32; BINS as usize];
    c.launch_ir(
        k,
        grid,
        &mut [
            LaunchArg::read(a),
            LaunchArg::read(b),
            LaunchArg::read_write(&mut out),
            LaunchArg::read_write(&mut mid),
            LaunchArg::read_write(&mut hist),
            LaunchArg::Value((n as u32).to_le_bytes().to_vec()),
        ],
    )?;
    Ok(Outputs { out, mid, hist })
}

/// Inputs of `n` elements each from `seed`: mostly small values (so comparisons go both
/// ways and loops run a few trips), a quarter of any size.
fn inputs(n: usize, seed: u32) -> (Vec<i32>, Vec<i32>) {
    let mut s = seed | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        match s % 4 {
            0 => s as i32,
            _ => (s % 41) as i32 - 20,
        }
    };
    let a = (0..n).map(|_| next()).collect();
    let b = (0..n).map(|_| next()).collect();
    (a, b)
}

/// Runs `p` over `a` and `b` on `groups` groups of `size` work items on every context and
/// compares each with the interpreter; the error names the backend and the first difference.
fn check_program(
    contexts: &[kiln::Context],
    p: &Program,
    (a, b): (&[i32], &[i32]),
    groups: u32,
    size: u32,
) -> Result<(), String> {
    let want = interpret(p, a, b, groups, size);
    let k = kernel(p).map_err(|e| format!("building: {e}"))?;
    validate(&inline_calls(&k)).map_err(|e| format!("the inlined kernel is invalid: {e}"))?;
    let grid = Grid::linear(groups, size);
    for c in contexts {
        let backend = c.device().backend;
        let got = run_on(c, &k, a, b, &grid).map_err(|e| format!("{backend}: {e}"))?;
        if got != want {
            return Err(format!(
                "{backend}, n = {}, {groups} groups of {size}: {}\n{}",
                a.len(),
                first_difference(&got, &want),
                print_kernel(&k)
            ));
        }
    }
    common::cuda_check_kernel(&k);
    Ok(())
}

/// Random programs with varying control flow give the interpreter's outputs on every backend.
#[test]
fn random_control_flow_matches_an_interpreter_on_every_backend() {
    let contexts = common::contexts();
    let mut runner = common::proptest_runner(24);
    let sizes = proptest::sample::select(vec![1u32, 2, 3, 4, 5, 7, 8, 12, 16, 33, 64]);
    let strategy = (program(), 0usize..200, sizes, 0u32..2, any::<u32>());
    runner
        .run(&strategy, |(p, n, size, extra, seed)| {
            let (a, b) = inputs(n, seed);
            let groups = (n as u32).div_ceil(size).max(1) + extra;
            check_program(&contexts, &p, (&a, &b), groups, size).map_err(TestCaseError::fail)
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

fn gt(x: X, y: X) -> C {
    C::Cmp(Cmp::Gt, x, y)
}

fn add(x: X, y: X) -> X {
    X::Bin(Op::Add, Box::new(x), Box::new(y))
}

fn low_bits(x: X) -> X {
    X::Bin(Op::And, Box::new(x), Box::new(X::Lit(7)))
}

/// The shapes the CPU backend's four-at-a-time lowering must get right, each in a kernel of
/// its own: a local declared inside a varying `if` and changed under a nested one; a loop
/// inside a varying `if` with a counter declared there; a loop that work items leave at
/// different times through `break`, `continue` and `return`, counting its trips in a local
/// declared before it (read after the loop); a `while` loop with a varying condition; and
/// calls, under a varying `if`, of a device function that returns from inside a loop.
#[test]
fn control_flow_the_cpu_runs_four_items_at_a_time_matches_the_interpreter() {
    let contexts = common::contexts();
    let below = |x: X, y: X| C::Cmp(Cmp::Lt, x, y);
    let programs = [
        vec![S::If(
            gt(X::A, X::Lit(0)),
            vec![S::Let(
                X::Lit(1),
                vec![
                    S::If(below(X::B, X::Lit(0)), vec![S::SetTemp(X::Lit(5))], vec![]),
                    S::Set(0, X::Temp),
                ],
            )],
            vec![],
        )],
        vec![S::If(
            gt(X::A, X::Lit(-5)),
            vec![S::For(
                X::Lit(6),
                vec![S::Set(
                    1,
                    add(X::Local(1), X::Gather(Box::new(X::Counter(0)))),
                )],
            )],
            vec![],
        )],
        vec![S::Let(
            X::Lit(0),
            vec![
                S::Loop(vec![
                    S::Break(gt(X::Temp, low_bits(X::B))),
                    S::SetTemp(add(X::Temp, X::Lit(1))),
                    S::Continue(gt(low_bits(X::A), X::Temp)),
                    S::Set(2, add(X::Local(2), X::Lit(100))),
                    S::Return(C::Cmp(Cmp::Eq, X::Temp, X::Lit(3))),
                ]),
                S::Set(3, X::Temp),
            ],
        )],
        vec![S::Loop(vec![
            S::Break(C::Not(Box::new(gt(X::Local(0), X::Lit(0))))),
            S::Set(
                0,
                X::Bin(Op::Shr, Box::new(X::Local(0)), Box::new(X::Lit(1))),
            ),
            S::Set(1, add(X::Local(1), X::Lit(1))),
        ])],
        vec![S::If(
            gt(X::A, X::Lit(0)),
            vec![S::Set(2, X::Call(Box::new(X::A), Box::new(low_bits(X::B))))],
            vec![S::Set(2, X::Call(Box::new(X::Lit(1)), Box::new(X::Lit(2))))],
        )],
    ];
    // The last program's device function returns from inside a loop, at a trip that depends
    // on its arguments.
    let function = vec![
        S::Loop(vec![
            S::Set(0, add(X::Local(0), X::Local(1))),
            S::Return(gt(X::Local(0), X::Lit(10))),
            S::Break(gt(X::Counter(0), X::Lit(3))),
        ]),
        S::Set(0, add(X::Local(0), X::Lit(1000))),
    ];
    let (a, b) = inputs(37, 7);
    for (j, body) in programs.into_iter().enumerate() {
        for guard in [Guard::If, Guard::Return, Guard::Unguarded] {
            let p = Program {
                init: 0,
                phases: vec![body.clone()],
                function: function.clone(),
                shift: 1,
                rounds: 0,
                guard,
            };
            for size in [4, 8, 7] {
                let groups = 37u32.div_ceil(size) + 1;
                if let Err(e) = check_program(&contexts, &p, (&a, &b), groups, size) {
                    panic!("program {j} with {guard:?}: {e}");
                }
            }
        }
    }
}

/// Where two outputs first differ, for failure messages.
fn first_difference(got: &Outputs, want: &Outputs) -> String {
    let parts = [
        ("out", &got.out, &want.out),
        ("mid", &got.mid, &want.mid),
        ("hist", &got.hist, &want.hist),
    ];
    for (name, g, w) in parts {
        if let Some(at) = g.iter().zip(w.iter()).position(|(x, y)| x != y) {
            return format!("{name}[{at}] is {}, the interpreter gives {}", g[at], w[at]);
        }
    }
    "lengths differ".into()
}

/// One step of a [`random_early_returns_in_short_kernels_match_plain_rust`] kernel, over
/// `v = a[i]` and the global index `i`.
#[derive(Clone, Debug)]
enum Step {
    /// `if (v op k) cmp m { return }`.
    Return(Op, i32, Cmp, i32),
    /// `if i % m == r { return }`.
    ReturnAt(u32, u32),
    /// `out[i] = v op k`.
    Store(Op, i32),
    /// `hist[(v op k) & 15] += 1`, atomically.
    Count(Op, i32),
    /// `if (v op k) cmp m && { hist[v & 15] += 1; true } { out[i] = v + 1 }` (with `||` and
    /// a right side giving `false` when `or`): the right side's effect happens only when
    /// Rust's `&&` or `||` evaluates it. Built as `#[kiln::kernel]` builds such a right side,
    /// under an `if`.
    ShortCircuit(Op, i32, Cmp, i32, bool),
}

/// Kernels of a few steps without loops: what the CPU backend runs in unrolled runs of four
/// quads, where a lane that returned in one quad stayed masked off in the next (the programs
/// of [`random_control_flow_matches_an_interpreter_on_every_backend`] are too long to reach
/// those runs), and `&&`/`||` whose right side has an effect. Checked against the same steps
/// run by a plain Rust loop over the items.
#[test]
fn random_early_returns_in_short_kernels_match_plain_rust() {
    let contexts = common::contexts();
    let mut runner = common::proptest_runner(48);
    let small = || {
        prop_oneof![
            -8i32..9,
            proptest::sample::select(vec![i32::MIN, i32::MAX, 1000])
        ]
    };
    let step = prop_oneof![
        3 => (op(), small(), cmp(), small()).prop_map(|(o, k, c, m)| Step::Return(o, k, c, m)),
        2 => (2u32..7, 0u32..7).prop_map(|(m, r)| Step::ReturnAt(m, r % m)),
        3 => (op(), small()).prop_map(|(o, k)| Step::Store(o, k)),
        1 => (op(), small()).prop_map(|(o, k)| Step::Count(o, k)),
        2 => (op(), small(), cmp(), small(), any::<bool>())
            .prop_map(|(o, k, c, m, or)| Step::ShortCircuit(o, k, c, m, or)),
    ];
    let sizes = proptest::sample::select(vec![16u32, 32, 64, 256, 1000]);
    let strategy = (
        proptest::collection::vec(step, 1..5),
        1usize..3000,
        sizes,
        any::<bool>(),
        any::<u32>(),
    );
    runner
        .run(&strategy, |(steps, n, size, guarded, seed)| {
            let (a, _) = inputs(n, seed);
            let k = Kernel::build("early", |k| {
                let a_mem = k.buffer::<i32>("a", Access::Read);
                let out = k.buffer::<i32>("out", Access::ReadWrite);
                let hist = k.buffer::<i32>("hist", Access::ReadWrite);
                let len = k.value::<u32>("n");
                let i = global_id(Axis::X);
                if guarded {
                    if_then(i.ge(len), return_);
                }
                let v = a_mem.load(i);
                let bin = |o: Op, x: Val<i32>, k: i32| binary_op(o, x, lit(k));
                for s in &steps {
                    match *s {
                        Step::Return(o, k, c, m) => if_then(compare_op(c, bin(o, v, k), lit(m)), return_),
                        Step::ReturnAt(m, r) => if_then((i % m).eq(r), return_),
                        Step::Store(o, k) => out.store(i, bin(o, v, k)),
                        Step::Count(o, k) => {
                            let at = (bin(o, v, k) & 15i32).cast::<u32>();
                            hist.atomic_add(at, 1i32);
                        }
                        Step::ShortCircuit(o, k, c, m, or) => {
                            let left = compare_op(c, bin(o, v, k), lit(m));
                            let slot = kiln::lang::Slot::<bool>::new("v");
                            let right = || {
                                hist.atomic_add((v & 15i32).cast::<u32>(), 1i32);
                                slot.put(!or);
                            };
                            match or {
                                false => if_else(left, right, || slot.put(false)),
                                true => if_else(left, || slot.put(true), right),
                            }
                            if_then(slot.take(), || out.store(i, v + 1i32));
                        }
                    }
                }
            })
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
            // The same steps in plain Rust, item by item; items past `n` read zero and their
            // stores are skipped, as kiln's rules say, unless the guard sent them away.
            let items = (n as u32).div_ceil(size) * size;
            let mut want_out = vec![UNSTORED; n];
            let mut want_hist = vec![0i32; BINS as usize];
            'items: for i in 0..items {
                if guarded && i as usize >= n {
                    continue;
                }
                let v = a.get(i as usize).copied().unwrap_or(0);
                for s in &steps {
                    match *s {
                        Step::Return(o, k, c, m) if compare(c, apply(o, v, k), m) => continue 'items,
                        Step::ReturnAt(m, r) if i % m == r => continue 'items,
                        Step::Store(o, k) => {
                            if let Some(slot) = want_out.get_mut(i as usize) {
                                *slot = apply(o, v, k);
                            }
                        }
                        Step::Count(o, k) => want_hist[(apply(o, v, k) & 15) as usize] += 1,
                        Step::ShortCircuit(o, k, c, m, or) => {
                            let left = compare(c, apply(o, v, k), m);
                            let mut right = || {
                                want_hist[(v & 15) as usize] += 1;
                                !or
                            };
                            let taken = match or {
                                false => left && right(),
                                true => left || right(),
                            };
                            if taken {
                                if let Some(slot) = want_out.get_mut(i as usize) {
                                    *slot = v.wrapping_add(1);
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            for c in &contexts {
                let mut out = vec![UNSTORED; n];
                let mut hist = vec![0i32; BINS as usize];
                c.launch_ir(
                    &k,
                    &Grid::linear(items / size, size),
                    &mut [
                        LaunchArg::read(&a),
                        LaunchArg::read_write(&mut out),
                        LaunchArg::read_write(&mut hist),
                        LaunchArg::Value((n as u32).to_le_bytes().to_vec()),
                    ],
                )
                .map_err(|e| TestCaseError::fail(format!("{}: {e}", c.device().backend)))?;
                let at = out.iter().zip(&want_out).position(|(x, y)| x != y);
                prop_assert!(
                    at.is_none() && hist == want_hist,
                    "{}, n = {n}, groups of {size}, steps {steps:?}: out[{at:?}] or hist differ\n{}",
                    c.device().backend,
                    print_kernel(&k)
                );
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}
