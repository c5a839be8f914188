//! Partial aggregates in kiln: what each SQL aggregate folds per row, how a batch's folds are
//! merged on the host, and the partial states DataFusion's final aggregate reads.
//!
//! Sums of integers and decimals are exact: each `i64` value is folded as two halves (its low
//! 32 bits summed as `u64`, its high 32 bits summed as `i64`), which cannot wrap below 2^31
//! rows, and put back together as an `i128` on the host, where batches are added with a
//! check; a state past its type's precision is an error, never a wrong sum. A batch whose
//! rows cannot take a sum past `i64` (its row count times the value's bound stays within
//! `i64`) folds that sum whole, as one `i64`, and the host splits it into the two halves.

use crate::expr::{bin, bitcast, cast, Expr, Sql};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue as Sv;
use datafusion::error::{DataFusionError, Result};
use kiln::ir::{expr_dyn, lit_value, AnyVal, BinaryOp, MathFn, ScalarType, ScalarValue, Type};

/// One SQL aggregate kiln computes.
#[derive(Clone, Debug)]
pub(crate) struct Aggregate {
    pub(crate) fun: Fun,
    /// Where its argument is not NULL, when it may be (not for `COUNT`, whose argument is
    /// already the 0 or 1 it counts): a `SUM`, `AVG`, `MIN` or `MAX` of the other rows.
    pub(crate) valid: Option<Expr>,
    /// The types of its partial state's fields, as DataFusion's final aggregate reads them.
    pub(crate) state: Vec<DataType>,
    /// Its text, for EXPLAIN.
    pub(crate) text: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Sum,
    Count,
    Min,
    Max,
    Avg,
}

impl Kind {
    /// The aggregate named `name` (lower case), if kiln computes it.
    pub(crate) fn of(name: &str) -> Option<Kind> {
        Some(match name {
            "sum" => Kind::Sum,
            "count" => Kind::Count,
            "min" => Kind::Min,
            "max" => Kind::Max,
            "avg" => Kind::Avg,
            _ => return None,
        })
    }
}

/// An aggregate with its argument: a count of rows has none (so is `COUNT(x)` of an `x`
/// that is never NULL), every other aggregate has one.
#[derive(Clone, Debug)]
pub(crate) enum Fun {
    /// `COUNT(*)` without an argument; with one, the sum of its 0s and 1s (`COUNT` of a
    /// column that may be NULL: 1 where it is not).
    Count(Option<Expr>),
    Sum(Expr),
    Avg(Expr),
    Min(Expr),
    Max(Expr),
}

impl Fun {
    /// The aggregate `kind` of `arg`; `None` where `kind` needs an argument and has none.
    pub(crate) fn new(kind: Kind, arg: Option<Expr>) -> Option<Fun> {
        Some(match (kind, arg) {
            (Kind::Count, arg) => Fun::Count(arg),
            (Kind::Sum, Some(e)) => Fun::Sum(e),
            (Kind::Avg, Some(e)) => Fun::Avg(e),
            (Kind::Min, Some(e)) => Fun::Min(e),
            (Kind::Max, Some(e)) => Fun::Max(e),
            (_, None) => return None,
        })
    }

    /// Its argument, if it has one.
    pub(crate) fn arg(&self) -> Option<&Expr> {
        match self {
            Fun::Count(e) => e.as_ref(),
            Fun::Sum(e) | Fun::Avg(e) | Fun::Min(e) | Fun::Max(e) => Some(e),
        }
    }

    /// Its argument, to renumber its inputs.
    pub(crate) fn arg_mut(&mut self) -> Option<&mut Expr> {
        match self {
            Fun::Count(e) => e.as_mut(),
            Fun::Sum(e) | Fun::Avg(e) | Fun::Min(e) | Fun::Max(e) => Some(e),
        }
    }
}

/// One column the kernel folds. Aggregates share parts: `COUNT(*)` and the count of every
/// `AVG` of a value never NULL are the row count, and `SUM(x)` and `AVG(x)` fold the same
/// sum, so each distinct part is folded once.
#[derive(Clone, Debug)]
enum Part {
    /// The number of rows.
    Rows,
    /// The sum of the low 32 bits of an exact value, as `u64`.
    Low(Expr),
    /// The sum of the high 32 bits of an exact value (arithmetic shift), as `i64`.
    High(Expr),
    /// The sum of an exact value, as `i64`, in a batch whose rows cannot take it past `i64`.
    Whole(Expr),
    /// The sum of a 0 or 1 `u32` (the rows a `COUNT` of a nullable column counts), as `u32`.
    Count(Expr),
    /// The sum of a float value, as `f64`.
    Float(Expr),
    /// The least exact value, as `i64`, of the rows where the second is true (all without).
    Min(Expr, Option<Expr>),
    /// The largest exact value, as `i64`, of the rows where the second is true.
    Max(Expr, Option<Expr>),
}

impl Part {
    fn identity(&self) -> ScalarValue {
        match self {
            Part::Rows | Part::Count(_) => ScalarValue::U32(0),
            Part::Low(_) => ScalarValue::U64(0),
            Part::High(_) | Part::Whole(_) => ScalarValue::I64(0),
            Part::Float(_) => ScalarValue::F64(0.0),
            Part::Min(..) => ScalarValue::I64(i64::MAX),
            Part::Max(..) => ScalarValue::I64(i64::MIN),
        }
    }

    /// The row's value of the part, from the row's input `cols`.
    fn value(&self, cols: &[AnyVal]) -> AnyVal {
        match self {
            Part::Rows => lit_value(ScalarValue::U32(1)),
            Part::Count(e) => e.emit(cols),
            Part::Low(e) => {
                let bits = bitcast(&cast(&e.emit(cols), ScalarType::I64), ScalarType::U64);
                op(
                    BinaryOp::And,
                    &bits,
                    &lit_value(ScalarValue::U64(0xffff_ffff)),
                )
            }
            Part::High(e) => {
                let v = cast(&e.emit(cols), ScalarType::I64);
                op(BinaryOp::Shr, &v, &lit_value(ScalarValue::I64(32)))
            }
            Part::Float(e) => cast(&e.emit(cols), ScalarType::F64),
            Part::Whole(e) => cast(&e.emit(cols), ScalarType::I64),
            Part::Min(e, valid) | Part::Max(e, valid) => {
                let v = cast(&e.emit(cols), ScalarType::I64);
                let Some(valid) = valid else {
                    return v;
                };
                let (c, other) = (valid.emit(cols), lit_value(self.identity()));
                expr_dyn(
                    kiln::ir::Expr::Select {
                        cond: c.handle(),
                        accept: v.handle(),
                        reject: other.handle(),
                    },
                    &[&c, &v, &other],
                    Type::Scalar(ScalarType::I64),
                )
            }
        }
    }

    /// Combines two folded values of the part.
    fn combine(&self, x: &AnyVal, y: &AnyVal) -> AnyVal {
        let fun = match self {
            Part::Min(..) => MathFn::Min,
            Part::Max(..) => MathFn::Max,
            _ => return op(BinaryOp::Add, x, y),
        };
        expr_dyn(
            kiln::ir::Expr::Math {
                fun,
                args: vec![x.handle(), y.handle()],
            },
            &[x, y],
            x.ty.clone(),
        )
    }

    fn is_add(&self) -> bool {
        !matches!(self, Part::Min(..) | Part::Max(..))
    }
}

impl Aggregate {
    /// Whether its argument sums as exact halves (integers and decimals).
    fn exact(&self) -> bool {
        self.fun
            .arg()
            .is_some_and(|a| !matches!(a.sql, Sql::Float(_)))
    }

    /// The parts this aggregate's state is made of, in the order [`State::merge`] reads them:
    /// with an argument that may be NULL, the count of the rows where it is not comes first
    /// and the other rows fold as the identity.
    fn parts(&self) -> Vec<Part> {
        let valid = self.valid.as_ref();
        let sum = |e: &Expr| {
            let e = match valid {
                Some(v) => e.or_else(v, ScalarValue::from_bits(e.sql.kiln(), 0)),
                None => e.clone(),
            };
            match self.exact() {
                true => vec![Part::Low(e.clone()), Part::High(e)],
                false => vec![Part::Float(e)],
            }
        };
        let count = valid.map(|v| Part::Count(Expr::count_of(v.clone())));
        match &self.fun {
            Fun::Count(None) => vec![Part::Rows],
            Fun::Count(Some(e)) => vec![Part::Count(e.clone())],
            Fun::Sum(e) => count.into_iter().chain(sum(e)).collect(),
            Fun::Avg(e) => std::iter::once(count.unwrap_or(Part::Rows))
                .chain(sum(e))
                .collect(),
            Fun::Min(e) => count
                .into_iter()
                .chain([Part::Min(e.clone(), valid.cloned())])
                .collect(),
            Fun::Max(e) => count
                .into_iter()
                .chain([Part::Max(e.clone(), valid.cloned())])
                .collect(),
        }
    }
}

/// `a op b`, of `a`'s type.
fn op(k: BinaryOp, a: &AnyVal, b: &AnyVal) -> AnyVal {
    let t = match a.ty {
        Type::Scalar(t) => t,
        _ => ScalarType::I64,
    };
    bin(k, a, b, t)
}

/// The distinct parts of a list of aggregates (the row count first), and where each
/// aggregate's parts are among them.
pub(crate) struct Folds {
    parts: Vec<Part>,
    /// For each aggregate, the positions of its parts.
    slots: Vec<Vec<usize>>,
}

/// Where a part of [`Folds`] comes from in the row of a batch's [`BatchFolds`].
#[derive(Clone, Copy, Debug)]
enum From {
    /// The same part, at this position.
    Same(usize),
    /// The low half of the whole sum at this position.
    LowOf(usize),
    /// The high half of the whole sum at this position.
    HighOf(usize),
}

/// The parts one batch folds: those of [`Folds`], with the exact sums that the batch's rows
/// cannot take past `i64` folded whole.
pub(crate) struct BatchFolds {
    parts: Vec<Part>,
    /// For each part of [`Folds`], where its value is in this batch's rows.
    from: Vec<From>,
}

impl Folds {
    pub(crate) fn new(aggregates: &[Aggregate]) -> Folds {
        let mut parts = vec![Part::Rows];
        let mut names = vec![format!("{:?}", Part::Rows)];
        let slots = aggregates
            .iter()
            .map(|a| {
                a.parts()
                    .into_iter()
                    .map(|p| {
                        let name = format!("{p:?}");
                        match names.iter().position(|n| *n == name) {
                            Some(i) => i,
                            None => {
                                names.push(name);
                                parts.push(p);
                                parts.len() - 1
                            }
                        }
                    })
                    .collect()
            })
            .collect();
        Folds { parts, slots }
    }

    /// The parts of a batch whose exact sums of an expression `e` fold whole where
    /// `whole(e)`.
    pub(crate) fn for_batch(&self, whole: impl Fn(&Expr) -> bool) -> BatchFolds {
        let mut batch = BatchFolds {
            parts: Vec::with_capacity(self.parts.len()),
            from: Vec::with_capacity(self.parts.len()),
        };
        for p in &self.parts {
            let from = match p {
                Part::Low(e) if whole(e) => {
                    batch.parts.push(Part::Whole(e.clone()));
                    From::LowOf(batch.parts.len() - 1)
                }
                // A sum's high half follows its low half.
                Part::High(e) if whole(e) => From::HighOf(batch.parts.len() - 1),
                other => {
                    batch.parts.push(other.clone());
                    From::Same(batch.parts.len() - 1)
                }
            };
            batch.from.push(from);
        }
        batch
    }

    /// Aggregate `i`'s folded values in `row`.
    fn of<'r>(&self, i: usize, row: &'r [ScalarValue]) -> impl Iterator<Item = ScalarValue> + 'r {
        let slots = self.slots[i].clone();
        slots.into_iter().map(move |s| row[s])
    }
}

impl BatchFolds {
    pub(crate) fn identity(&self) -> Vec<ScalarValue> {
        self.parts.iter().map(Part::identity).collect()
    }

    /// Whether every part is an integer addition.
    pub(crate) fn all_adds(&self) -> bool {
        self.parts
            .iter()
            .all(|p| p.is_add() && p.identity().ty().is_int())
    }

    /// The values a row folds.
    pub(crate) fn values(&self, cols: &[AnyVal]) -> Vec<AnyVal> {
        self.parts.iter().map(|p| p.value(cols)).collect()
    }

    /// Combines two rows of folded values.
    pub(crate) fn combine(&self, a: &[AnyVal], b: &[AnyVal]) -> Vec<AnyVal> {
        self.parts
            .iter()
            .zip(a.iter().zip(b))
            .map(|(p, (x, y))| p.combine(x, y))
            .collect()
    }

    /// A row of this batch's folds as a row of [`Folds`]: whole sums split into halves.
    pub(crate) fn widen(&self, row: &[ScalarValue]) -> Vec<ScalarValue> {
        self.from
            .iter()
            .map(|f| match *f {
                From::Same(j) => row[j],
                From::LowOf(j) => ScalarValue::U64(row[j].to_bits() & 0xffff_ffff),
                From::HighOf(j) => ScalarValue::I64(row[j].to_bits() as i64 >> 32),
            })
            .collect()
    }
}

/// One aggregate's state across batches.
#[derive(Clone, Debug)]
pub(crate) enum State {
    Count(u64),
    ExactSum(Option<i128>),
    FloatSum(Option<f64>),
    Avg(u64, Box<State>),
    Min(Option<i64>),
    Max(Option<i64>),
    /// A `SUM`, `MIN` or `MAX` of an argument that may be NULL: folded first, the count of
    /// rows where it is not, which stands for the rows the state merges.
    Valid(Box<State>),
}

fn overflow(what: &str) -> DataFusionError {
    DataFusionError::Execution(format!("kiln: {what} overflows"))
}

impl State {
    fn new(a: &Aggregate) -> State {
        let sum = || match a.exact() {
            true => State::ExactSum(None),
            false => State::FloatSum(None),
        };
        let state = match a.fun {
            Fun::Count(_) => State::Count(0),
            Fun::Sum(_) => sum(),
            // Its count is the rows it merges, with or without NULLs.
            Fun::Avg(_) => return State::Avg(0, Box::new(sum())),
            Fun::Min(_) => State::Min(None),
            Fun::Max(_) => State::Max(None),
        };
        match (&a.fun, &a.valid) {
            (Fun::Sum(_) | Fun::Min(_) | Fun::Max(_), Some(_)) => State::Valid(Box::new(state)),
            _ => state,
        }
    }

    /// Adds the folded values `v` (this state's columns) of `rows` rows.
    fn merge(&mut self, v: &mut impl Iterator<Item = ScalarValue>, rows: u64) -> Result<()> {
        let mut next = || {
            v.next().ok_or_else(|| {
                DataFusionError::Internal("a fold returned fewer columns than its parts".into())
            })
        };
        match self {
            State::Count(c) => *c += next()?.to_bits() as u32 as u64,
            State::ExactSum(s) => {
                let lo = next()?.to_bits() as i128;
                let hi = next()?.to_bits() as i64 as i128;
                if rows > 0 {
                    let part = (hi << 32) + lo;
                    let total = s.unwrap_or(0).checked_add(part);
                    *s = Some(total.ok_or_else(|| overflow("a SUM"))?);
                }
            }
            State::FloatSum(s) => {
                let x = f64::from_bits(next()?.to_bits());
                if rows > 0 {
                    *s = Some(s.unwrap_or(0.0) + x);
                }
            }
            State::Avg(c, sum) => {
                let n = next()?.to_bits() as u32 as u64;
                *c += n;
                sum.merge(v, n)?;
            }
            State::Valid(state) => {
                let n = next()?.to_bits() as u32 as u64;
                state.merge(v, n)?;
            }
            State::Min(m) => {
                let x = next()?.to_bits() as i64;
                if rows > 0 {
                    *m = Some(m.map_or(x, |p| p.min(x)));
                }
            }
            State::Max(m) => {
                let x = next()?.to_bits() as i64;
                if rows > 0 {
                    *m = Some(m.map_or(x, |p| p.max(x)));
                }
            }
        }
        Ok(())
    }

    /// The partial state's field values, of the types `types`.
    fn fields(&self, types: &[DataType], out: &mut Vec<Sv>) -> Result<()> {
        match self {
            State::Count(c) => out.push(Sv::Int64(Some(*c as i64))),
            State::ExactSum(s) => out.push(exact(*s, &types[0])?),
            State::FloatSum(s) => out.push(Sv::Float64(*s)),
            State::Avg(c, sum) => {
                out.push(Sv::UInt64(Some(*c)));
                sum.fields(&types[1..], out)?;
            }
            State::Min(m) | State::Max(m) => out.push(exact(m.map(i128::from), &types[0])?),
            State::Valid(state) => state.fields(types, out)?,
        }
        Ok(())
    }
}

/// An exact value (scaled, for decimals) as a value of `t`; integer sums wrap as
/// DataFusion's do, decimals past their precision fail.
fn exact(v: Option<i128>, t: &DataType) -> Result<Sv> {
    let Some(v) = v else {
        return Sv::try_from(t);
    };
    match t {
        DataType::Decimal128(p, s) => {
            if v.unsigned_abs() >= 10u128.pow(*p as u32) {
                return Err(overflow(&format!(
                    "a Decimal128({p}, {s}) value {v} (scaled)"
                )));
            }
            Ok(Sv::Decimal128(Some(v), *p, *s))
        }
        DataType::Date32 => Ok(Sv::Date32(Some(v as i32))),
        DataType::UInt64 => Ok(Sv::UInt64(Some(v as u64))),
        DataType::Int64 => Ok(Sv::Int64(Some(v as i64))),
        other => Sv::Int64(Some(v as i64)).cast_to(other),
    }
}

/// The states of every group seen so far, in the order the groups were first seen.
pub(crate) struct Groups<'a> {
    aggregates: &'a [Aggregate],
    folds: Folds,
    index: std::collections::HashMap<Vec<Sv>, usize>,
    keys: Vec<Vec<Sv>>,
    states: Vec<Vec<State>>,
}

impl<'a> Groups<'a> {
    pub(crate) fn new(aggregates: &'a [Aggregate]) -> Groups<'a> {
        Groups {
            aggregates,
            folds: Folds::new(aggregates),
            index: Default::default(),
            keys: Vec::new(),
            states: Vec::new(),
        }
    }

    /// The folds whose rows [`Groups::add`] takes.
    pub(crate) fn folds(&self) -> &Folds {
        &self.folds
    }

    /// Adds one group's folded row (a value per part of [`Groups::folds`]).
    pub(crate) fn add(&mut self, key: Vec<Sv>, folded: Vec<ScalarValue>) -> Result<()> {
        let slot = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                self.keys.push(key.clone());
                self.states
                    .push(self.aggregates.iter().map(State::new).collect());
                self.index.insert(key, self.keys.len() - 1);
                self.keys.len() - 1
            }
        };
        let rows = folded[0].to_bits();
        for (i, s) in self.states[slot].iter_mut().enumerate() {
            s.merge(&mut self.folds.of(i, &folded), rows)?;
        }
        Ok(())
    }

    /// Makes sure a group with `key` exists (a grouping without keys has one row always).
    pub(crate) fn ensure(&mut self, key: Vec<Sv>) {
        if !self.index.contains_key(&key) {
            self.keys.push(key.clone());
            self.states
                .push(self.aggregates.iter().map(State::new).collect());
            self.index.insert(key, self.keys.len() - 1);
        }
    }

    /// The rows of the partial states: each group's key values, then its states' fields.
    pub(crate) fn rows(&self) -> Result<Vec<Vec<Sv>>> {
        self.keys
            .iter()
            .zip(&self.states)
            .map(|(k, states)| {
                let mut row = k.clone();
                for (s, a) in states.iter().zip(self.aggregates) {
                    s.fields(&a.state, &mut row)?;
                }
                Ok(row)
            })
            .collect()
    }
}
