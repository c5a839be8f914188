//! SQL scalar expressions (DataFusion's physical expressions) as kiln IR.
//!
//! [`Sql`] says how kiln holds a SQL type: integers and dates as themselves, decimals as their
//! scaled `i64` values, floats as floats, booleans as `bool`. [`translate`] turns an
//! expression into an [`Expr`] tree, or says why it cannot (the reason EXPLAIN shows).
//! Integer and decimal arithmetic is exact in SQL and wraps in kiln, so every integer node
//! has a bound on its magnitude, computed per batch from the inputs' largest magnitudes
//! ([`Expr::bound`]); a batch whose bounds could leave the node's type fails instead of
//! giving a wrong answer.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue as Sv;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions as dfx;
use datafusion::physical_expr::PhysicalExpr;
use kiln::ir::{expr_dyn, lit_value, AnyVal, BinaryOp, ScalarType, ScalarValue, Type, UnaryOp};
use std::sync::Arc;

/// How kiln holds the values of a SQL type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sql {
    Bool,
    /// An integer of this kiln type.
    Int(ScalarType),
    /// A float of this kiln type.
    Float(ScalarType),
    /// Decimal128 of this precision and scale, as scaled `i64` values.
    Decimal(u8, i8),
    /// Date32: days since 1970 as `i32`.
    Date,
}

impl Sql {
    /// The kiln type of the values.
    pub(crate) fn kiln(self) -> ScalarType {
        match self {
            Sql::Bool => ScalarType::Bool,
            Sql::Int(t) | Sql::Float(t) => t,
            Sql::Decimal(..) => ScalarType::I64,
            Sql::Date => ScalarType::I32,
        }
    }

    /// kiln's view of `dt`, or why there is none.
    pub(crate) fn of(dt: &DataType) -> Result<Sql, String> {
        Ok(match dt {
            DataType::Boolean => Sql::Bool,
            DataType::Int8 => Sql::Int(ScalarType::I8),
            DataType::Int16 => Sql::Int(ScalarType::I16),
            DataType::Int32 => Sql::Int(ScalarType::I32),
            DataType::Int64 => Sql::Int(ScalarType::I64),
            DataType::UInt8 => Sql::Int(ScalarType::U8),
            DataType::UInt16 => Sql::Int(ScalarType::U16),
            DataType::UInt32 => Sql::Int(ScalarType::U32),
            DataType::UInt64 => Sql::Int(ScalarType::U64),
            DataType::Float32 => Sql::Float(ScalarType::F32),
            DataType::Float64 => Sql::Float(ScalarType::F64),
            DataType::Decimal128(p, s) if *s >= 0 => Sql::Decimal(*p, *s),
            DataType::Date32 => Sql::Date,
            other => return Err(format!("type {other}")),
        })
    }

    fn is_exact(self) -> bool {
        matches!(self, Sql::Int(_) | Sql::Decimal(..) | Sql::Date)
    }
}

/// The largest magnitude a value of `t` may have and still be exact in it.
fn type_limit(t: ScalarType) -> i128 {
    match t {
        ScalarType::U8 | ScalarType::U16 | ScalarType::U32 | ScalarType::U64 => {
            (1i128 << t.bits()) - 1
        }
        _ => (1i128 << (t.bits() - 1)) - 1,
    }
}

/// A translated expression: what it computes, how kiln holds the result, and where it is
/// not NULL.
///
/// `valid` is a boolean expression, true on the rows where the value is not NULL (`None`:
/// never NULL). Only the top of a translated tree's is read: the filter and the aggregates
/// turn it into nodes ([`Expr::known_true`], [`Expr::count_of`], masked folds), so
/// [`Expr::inputs`], [`Expr::bound`] and [`Expr::emit`] read the nodes alone. Where the
/// value is NULL, the node computes some value of its type that nothing reads.
#[derive(Clone, Debug)]
pub(crate) struct Expr {
    pub(crate) node: Node,
    pub(crate) sql: Sql,
    pub(crate) valid: Option<Box<Expr>>,
}

#[derive(Clone, Debug)]
pub(crate) enum Node {
    /// Input column number `i` of the kiln query.
    Input(usize),
    Literal(ScalarValue),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// Compares the operands by total order (floats as Arrow compares them).
    Compare(BinaryOp, Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Neg(Box<Expr>),
    /// A numeric conversion to the node's type.
    Cast(Box<Expr>),
    /// An exact integer times `10^k`.
    Scale(Box<Expr>, u32),
    /// A float divided by `10^k` (a decimal's value as a float).
    Unscale(Box<Expr>, u32),
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
}

/// An input column's magnitude bound: exact inputs have one per batch.
pub(crate) type Bounds = [Option<i128>];

impl Expr {
    fn new(node: Node, sql: Sql) -> Expr {
        Expr {
            node,
            sql,
            valid: None,
        }
    }

    /// Input column `i`, of `sql`, never NULL.
    pub(crate) fn input(i: usize, sql: Sql) -> Expr {
        Expr::new(Node::Input(i), sql)
    }

    fn boolean(b: bool) -> Expr {
        Expr::new(Node::Literal(ScalarValue::Bool(b)), Sql::Bool)
    }

    /// `then` where the boolean `cond` holds, else `otherwise` (of `then`'s type), never NULL
    /// itself.
    fn select(cond: Expr, then: Expr, otherwise: Expr) -> Expr {
        let sql = then.sql;
        Expr::new(
            Node::Select(Box::new(cond), Box::new(then), Box::new(otherwise)),
            sql,
        )
    }

    /// The same value, NULL where `valid` is false (never, for `None`).
    pub(crate) fn with_valid(mut self, valid: Option<Expr>) -> Expr {
        self.valid = valid.map(Box::new);
        self
    }

    /// Where the value is not NULL, if it may be.
    pub(crate) fn validity(&self) -> Option<Expr> {
        self.valid.as_deref().cloned()
    }

    /// The value, with nothing said about NULLs.
    pub(crate) fn value(&self) -> Expr {
        self.clone().with_valid(None)
    }

    /// Where a boolean is TRUE (not FALSE, not NULL): the rows a filter keeps.
    pub(crate) fn known_true(&self) -> Expr {
        match self.validity() {
            None => self.value(),
            Some(v) => logic(BinaryOp::And, self.value(), v),
        }
    }

    /// Where a boolean is FALSE (not TRUE, not NULL).
    fn known_false(&self) -> Expr {
        let not = Expr::new(Node::Not(Box::new(self.value())), Sql::Bool);
        match self.validity() {
            None => not,
            Some(v) => logic(BinaryOp::And, not, v),
        }
    }

    /// `self` where `valid`, else the literal `otherwise` of the same type: a value that folds
    /// as if the row were not there.
    pub(crate) fn or_else(&self, valid: &Expr, otherwise: ScalarValue) -> Expr {
        let other = Expr::new(Node::Literal(otherwise), self.sql);
        Expr::select(valid.clone(), self.value(), other)
    }

    /// The input columns the expression reads.
    pub(crate) fn inputs(&self, out: &mut Vec<usize>) {
        match &self.node {
            Node::Input(i) => out.push(*i),
            Node::Literal(_) => {}
            Node::Binary(_, a, b) | Node::Compare(_, a, b) => {
                a.inputs(out);
                b.inputs(out);
            }
            Node::Not(a)
            | Node::Neg(a)
            | Node::Cast(a)
            | Node::Scale(a, _)
            | Node::Unscale(a, _) => a.inputs(out),
            Node::Select(c, a, b) => {
                c.inputs(out);
                a.inputs(out);
                b.inputs(out);
            }
        }
    }

    /// The largest magnitude the value may have given the inputs' `bounds`, checked against
    /// its kiln type at every exact node; `Err` names the node that could overflow. Not
    /// exact values give 0.
    pub(crate) fn bound(&self, bounds: &Bounds) -> Result<i128, String> {
        let b = match &self.node {
            Node::Input(i) => bounds.get(*i).copied().flatten().unwrap_or(0),
            Node::Literal(v) => literal_magnitude(*v),
            Node::Binary(op, a, c) => {
                let (x, y) = (a.bound(bounds)?, c.bound(bounds)?);
                match op {
                    BinaryOp::Add | BinaryOp::Sub => x.saturating_add(y),
                    BinaryOp::Mul => x.saturating_mul(y),
                    _ => 0,
                }
            }
            Node::Compare(_, a, c) => {
                a.bound(bounds)?;
                c.bound(bounds)?;
                0
            }
            Node::Not(a) => {
                a.bound(bounds)?;
                0
            }
            Node::Neg(a) | Node::Cast(a) => a.bound(bounds)?,
            Node::Scale(a, k) => a.bound(bounds)?.saturating_mul(10i128.pow(*k)),
            Node::Unscale(a, _) => {
                a.bound(bounds)?;
                0
            }
            Node::Select(c, a, d) => {
                c.bound(bounds)?;
                a.bound(bounds)?.max(d.bound(bounds)?)
            }
        };
        if self.sql.is_exact() {
            if b > type_limit(self.sql.kiln()) {
                return Err(format!(
                    "a {:?} value may reach {b} in magnitude, past kiln's {}",
                    self.sql,
                    self.sql.kiln()
                ));
            }
            if let Sql::Decimal(p, _) = self.sql {
                if b >= 10i128.pow(p as u32) {
                    return Err(format!(
                        "a Decimal128({p}) value may reach {b} (scaled), past its precision"
                    ));
                }
            }
        }
        Ok(b)
    }

    /// 1 where `valid` (a boolean) is true and 0 elsewhere, as a `u32`: what `COUNT` of a
    /// column that may be NULL adds up.
    pub(crate) fn count_of(valid: Expr) -> Expr {
        let one = Expr::new(
            Node::Literal(ScalarValue::U32(1)),
            Sql::Int(ScalarType::U32),
        );
        let zero = Expr::new(
            Node::Literal(ScalarValue::U32(0)),
            Sql::Int(ScalarType::U32),
        );
        Expr::select(valid, one, zero)
    }

    /// The IR computing the value from the row's input `cols`.
    pub(crate) fn emit(&self, cols: &[AnyVal]) -> AnyVal {
        let t = self.sql.kiln();
        match &self.node {
            Node::Input(i) => cols[*i].clone(),
            Node::Literal(v) => lit_value(*v),
            Node::Binary(op, a, b) => bin(*op, &a.emit(cols), &b.emit(cols), t),
            Node::Compare(op, a, b) => {
                let (x, y) = (a.emit(cols), b.emit(cols));
                let (x, y) = match a.sql {
                    Sql::Float(ft) => (total_order(&x, ft), total_order(&y, ft)),
                    _ => (x, y),
                };
                bin(*op, &x, &y, ScalarType::Bool)
            }
            Node::Not(a) => unary(UnaryOp::Not, &a.emit(cols)),
            Node::Neg(a) => unary(UnaryOp::Neg, &a.emit(cols)),
            Node::Cast(a) => cast(&a.emit(cols), t),
            Node::Scale(a, k) => {
                let x = a.emit(cols);
                let f = lit_value(ScalarValue::from_bits(t, 10u64.pow(*k)));
                bin(BinaryOp::Mul, &x, &f, t)
            }
            Node::Unscale(a, k) => {
                let x = a.emit(cols);
                let f = match t {
                    ScalarType::F32 => ScalarValue::F32(10f32.powi(*k as i32)),
                    _ => ScalarValue::F64(10f64.powi(*k as i32)),
                };
                bin(BinaryOp::Div, &x, &lit_value(f), t)
            }
            Node::Select(c, a, b) => {
                let (c, a, b) = (c.emit(cols), a.emit(cols), b.emit(cols));
                expr_dyn(
                    kiln::ir::Expr::Select {
                        cond: c.handle(),
                        accept: a.handle(),
                        reject: b.handle(),
                    },
                    &[&c, &a, &b],
                    Type::Scalar(t),
                )
            }
        }
    }
}

fn literal_magnitude(v: ScalarValue) -> i128 {
    let t = v.ty();
    if !t.is_int() {
        return 0;
    }
    let bits = v.to_bits();
    if t.is_signed() {
        let unused = 64 - t.bits();
        (((bits << unused) as i64) >> unused).unsigned_abs() as i128
    } else {
        bits as i128
    }
}

/// `a op b` of two booleans that are never NULL.
fn logic(op: BinaryOp, a: Expr, b: Expr) -> Expr {
    Expr::new(Node::Binary(op, Box::new(a), Box::new(b)), Sql::Bool)
}

/// Where both `a` and `b` are valid (`None`: always).
fn both_valid(a: &Expr, b: &Expr) -> Option<Expr> {
    match (a.validity(), b.validity()) {
        (None, v) | (v, None) => v,
        (Some(x), Some(y)) => Some(logic(BinaryOp::And, x, y)),
    }
}

/// `a AND b` or `a OR b` in SQL's three-valued logic: TRUE where the known-TRUE rows say
/// so, FALSE where the known-FALSE ones do, NULL elsewhere.
fn three_valued(op: BinaryOp, a: Expr, b: Expr) -> Expr {
    if a.valid.is_none() && b.valid.is_none() {
        return logic(op, a, b);
    }
    let (t, f) = match op {
        BinaryOp::And => (
            logic(BinaryOp::And, a.known_true(), b.known_true()),
            logic(BinaryOp::Or, a.known_false(), b.known_false()),
        ),
        _ => (
            logic(BinaryOp::Or, a.known_true(), b.known_true()),
            logic(BinaryOp::And, a.known_false(), b.known_false()),
        ),
    };
    let valid = logic(BinaryOp::Or, t.clone(), f);
    t.with_valid(Some(valid))
}

/// `a op b`, of type `t`.
pub(crate) fn bin(op: BinaryOp, a: &AnyVal, b: &AnyVal, t: ScalarType) -> AnyVal {
    expr_dyn(
        kiln::ir::Expr::Binary {
            op,
            lhs: a.handle(),
            rhs: b.handle(),
        },
        &[a, b],
        Type::Scalar(t),
    )
}

fn unary(op: UnaryOp, a: &AnyVal) -> AnyVal {
    expr_dyn(
        kiln::ir::Expr::Unary {
            op,
            arg: a.handle(),
        },
        &[a],
        a.ty.clone(),
    )
}

/// `a` converted to `to` (itself when it is of `to`).
pub(crate) fn cast(a: &AnyVal, to: ScalarType) -> AnyVal {
    if a.ty == Type::Scalar(to) {
        return a.clone();
    }
    expr_dyn(
        kiln::ir::Expr::Cast {
            arg: a.handle(),
            to,
        },
        &[a],
        Type::Scalar(to),
    )
}

/// `a`'s bits as a `to`.
pub(crate) fn bitcast(a: &AnyVal, to: ScalarType) -> AnyVal {
    expr_dyn(
        kiln::ir::Expr::Bitcast {
            arg: a.handle(),
            to,
        },
        &[a],
        Type::Scalar(to),
    )
}

/// A float's bits as a signed integer ordered as `total_cmp` orders the floats (how Arrow
/// compares them): negative values have their magnitude bits flipped.
fn total_order(x: &AnyVal, ft: ScalarType) -> AnyVal {
    let (s, u, bits) = match ft {
        ScalarType::F32 => (ScalarType::I32, ScalarType::U32, 31u64),
        _ => (ScalarType::I64, ScalarType::U64, 63),
    };
    let b = bitcast(x, s);
    let sign = bin(
        BinaryOp::Shr,
        &b,
        &lit_value(ScalarValue::from_bits(s, bits)),
        s,
    );
    let mask = bin(
        BinaryOp::Shr,
        &bitcast(&sign, u),
        &lit_value(ScalarValue::from_bits(u, 1)),
        u,
    );
    bin(BinaryOp::Xor, &b, &bitcast(&mask, s), s)
}

/// What a column of the current schema is to the translator.
#[derive(Clone, Debug)]
pub(crate) enum Scoped {
    /// A value kiln computes.
    Value(Expr),
    /// A column kiln cannot compute with (a string, a key the host computes), `why` not, and
    /// where it is not NULL, if it may be. A grouping may still name it (the host codes group
    /// keys), and `IS [NOT] NULL` and `COUNT` read its validity.
    Opaque { why: String, valid: Option<Expr> },
}

/// Where `e` (over a schema whose columns are `scope`) is not NULL, if it may be (`None`
/// where it never is), or why kiln cannot say. Of a column, also one kiln cannot compute with.
pub(crate) fn validity(
    e: &Arc<dyn PhysicalExpr>,
    scope: &[Scoped],
) -> Result<Option<Expr>, String> {
    if let Some(c) = e.downcast_ref::<dfx::Column>() {
        if let Some(Scoped::Opaque { valid, .. }) = scope.get(c.index()) {
            return Ok(valid.clone());
        }
    }
    Ok(translate(e, scope)?.validity())
}

/// Translates `e` (over a schema whose columns are `scope`) or says why not.
pub(crate) fn translate(e: &Arc<dyn PhysicalExpr>, scope: &[Scoped]) -> Result<Expr, String> {
    if let Some(c) = e.downcast_ref::<dfx::Column>() {
        return match scope.get(c.index()) {
            Some(Scoped::Value(v)) => Ok(v.clone()),
            Some(Scoped::Opaque { why, .. }) => Err(format!("column {} is {why}", c.name())),
            None => Err(format!("column {} is out of range", c.name())),
        };
    }
    if let Some(l) = e.downcast_ref::<dfx::Literal>() {
        return literal(l.value());
    }
    if let Some(b) = e.downcast_ref::<dfx::BinaryExpr>() {
        let (l, r) = (translate(b.left(), scope)?, translate(b.right(), scope)?);
        return binary(*b.op(), l, r);
    }
    if let Some(n) = e.downcast_ref::<dfx::NotExpr>() {
        let a = translate(n.arg(), scope)?;
        return match a.sql {
            Sql::Bool => {
                let valid = a.validity();
                Ok(Expr::new(Node::Not(Box::new(a)), Sql::Bool).with_valid(valid))
            }
            t => Err(format!("NOT of {t:?}")),
        };
    }
    if let Some(n) = e.downcast_ref::<dfx::NegativeExpr>() {
        let a = translate(n.arg(), scope)?;
        return match a.sql {
            Sql::Int(_) | Sql::Float(_) | Sql::Decimal(..) => {
                let (sql, valid) = (a.sql, a.validity());
                Ok(Expr::new(Node::Neg(Box::new(a)), sql).with_valid(valid))
            }
            t => Err(format!("negation of {t:?}")),
        };
    }
    if let Some(c) = e.downcast_ref::<dfx::CastExpr>() {
        let a = translate(c.expr(), scope)?;
        let valid = a.validity();
        return Ok(convert(a, Sql::of(c.cast_type())?)?.with_valid(valid));
    }
    if let Some(n) = e.downcast_ref::<dfx::IsNullExpr>() {
        return Ok(match validity(n.arg(), scope)? {
            None => Expr::boolean(false),
            Some(v) => Expr::new(Node::Not(Box::new(v)), Sql::Bool),
        });
    }
    if let Some(n) = e.downcast_ref::<dfx::IsNotNullExpr>() {
        return Ok(validity(n.arg(), scope)?.unwrap_or(Expr::boolean(true)));
    }
    if let Some(i) = e.downcast_ref::<dfx::InListExpr>() {
        let x = translate(i.expr(), scope)?;
        let mut any_of: Option<Expr> = None;
        for item in i.list() {
            let eq = binary(Operator::Eq, x.clone(), translate(item, scope)?)?;
            any_of = Some(match any_of {
                None => eq,
                Some(prev) => binary(Operator::Or, prev, eq)?,
            });
        }
        let found = any_of.unwrap_or(Expr::boolean(false));
        return Ok(match i.negated() {
            true => {
                let valid = found.validity();
                Expr::new(Node::Not(Box::new(found)), Sql::Bool).with_valid(valid)
            }
            false => found,
        });
    }
    if let Some(c) = e.downcast_ref::<dfx::CaseExpr>() {
        let Some(otherwise) = c.else_expr() else {
            return Err("CASE without ELSE (its NULL)".into());
        };
        let mut result = translate(otherwise, scope)?;
        let base = c.expr().map(|b| translate(b, scope)).transpose()?;
        for (when, then) in c.when_then_expr().iter().rev() {
            let when = translate(when, scope)?;
            let cond = match &base {
                Some(b) => binary(Operator::Eq, b.clone(), when)?,
                None => when,
            };
            let then = translate(then, scope)?;
            if then.sql != result.sql || cond.sql != Sql::Bool {
                return Err("CASE branches of different types".into());
            }
            // A WHEN that is NULL is not taken.
            let cond = cond.known_true();
            let valid = match (then.validity(), result.validity()) {
                (None, None) => None,
                (a, b) => Some(Expr::select(
                    cond.clone(),
                    a.unwrap_or(Expr::boolean(true)),
                    b.unwrap_or(Expr::boolean(true)),
                )),
            };
            result = Expr::select(cond, then, result).with_valid(valid);
        }
        return Ok(result);
    }
    Err(format!("expression {e}"))
}

fn literal(v: &Sv) -> Result<Expr, String> {
    let (value, sql) = match v {
        Sv::Boolean(Some(b)) => (ScalarValue::Bool(*b), Sql::Bool),
        Sv::Int8(Some(x)) => (ScalarValue::I8(*x), Sql::Int(ScalarType::I8)),
        Sv::Int16(Some(x)) => (ScalarValue::I16(*x), Sql::Int(ScalarType::I16)),
        Sv::Int32(Some(x)) => (ScalarValue::I32(*x), Sql::Int(ScalarType::I32)),
        Sv::Int64(Some(x)) => (ScalarValue::I64(*x), Sql::Int(ScalarType::I64)),
        Sv::UInt8(Some(x)) => (ScalarValue::U8(*x), Sql::Int(ScalarType::U8)),
        Sv::UInt16(Some(x)) => (ScalarValue::U16(*x), Sql::Int(ScalarType::U16)),
        Sv::UInt32(Some(x)) => (ScalarValue::U32(*x), Sql::Int(ScalarType::U32)),
        Sv::UInt64(Some(x)) => (ScalarValue::U64(*x), Sql::Int(ScalarType::U64)),
        Sv::Float32(Some(x)) => (ScalarValue::F32(*x), Sql::Float(ScalarType::F32)),
        Sv::Float64(Some(x)) => (ScalarValue::F64(*x), Sql::Float(ScalarType::F64)),
        Sv::Date32(Some(d)) => (ScalarValue::I32(*d), Sql::Date),
        Sv::Decimal128(Some(x), p, s) if *s >= 0 => {
            let v = i64::try_from(*x).map_err(|_| format!("decimal literal {v} past i64"))?;
            (ScalarValue::I64(v), Sql::Decimal(*p, *s))
        }
        // A typed NULL: some value of the type, never valid.
        // An untyped NULL (`count(null)`), as a boolean that is never valid.
        Sv::Null => return Ok(Expr::boolean(false).with_valid(Some(Expr::boolean(false)))),
        other if other.is_null() => {
            let zero = Sv::new_zero(&other.data_type())
                .map_err(|_| format!("a NULL literal of type {}", other.data_type()))?;
            return Ok(literal(&zero)?.with_valid(Some(Expr::boolean(false))));
        }
        other => return Err(format!("literal {other} of type {}", other.data_type())),
    };
    Ok(Expr::new(Node::Literal(value), sql))
}

/// `a` converted to `to`, as Arrow's cast does (exact conversions only).
fn convert(a: Expr, to: Sql) -> Result<Expr, String> {
    let from = a.sql;
    if from == to {
        return Ok(a);
    }
    let node = match (from, to) {
        (Sql::Int(_), Sql::Int(_))
        | (Sql::Int(_), Sql::Float(_))
        | (Sql::Float(_), Sql::Float(_)) => Node::Cast(Box::new(a)),
        (Sql::Int(_), Sql::Decimal(_, s)) => {
            let wide = Expr::new(Node::Cast(Box::new(a)), Sql::Int(ScalarType::I64));
            Node::Scale(Box::new(wide), s as u32)
        }
        (Sql::Decimal(_, s1), Sql::Decimal(_, s2)) if s2 >= s1 => {
            Node::Scale(Box::new(a), (s2 - s1) as u32)
        }
        (Sql::Decimal(_, s), Sql::Float(ft)) => {
            let f = Expr::new(Node::Cast(Box::new(a)), Sql::Float(ft));
            Node::Unscale(Box::new(f), s as u32)
        }
        (f, t) => return Err(format!("CAST from {f:?} to {t:?}")),
    };
    Ok(Expr::new(node, to))
}

/// `a` and `b` as decimals of the larger scale.
fn same_scale(a: Expr, b: Expr) -> Result<(Expr, Expr, i8), String> {
    let scale = |e: &Expr| match e.sql {
        Sql::Decimal(_, s) => s,
        _ => 0,
    };
    let s = scale(&a).max(scale(&b));
    let up = |e: Expr| -> Result<Expr, String> {
        let k = s - scale(&e);
        let sql = Sql::Decimal(38, s);
        match e.sql {
            Sql::Decimal(..) => Ok(Expr::new(Node::Scale(Box::new(e), k as u32), sql)),
            _ => convert(e, sql),
        }
    };
    Ok((up(a)?, up(b)?, s))
}

/// `a op b`: NULL where either is (AND and OR as SQL's three-valued logic has them).
fn binary(op: Operator, a: Expr, b: Expr) -> Result<Expr, String> {
    let logical = matches!(op, Operator::And | Operator::Or);
    if logical {
        return match (a.sql, b.sql) {
            (Sql::Bool, Sql::Bool) => {
                let k = match op {
                    Operator::And => BinaryOp::And,
                    _ => BinaryOp::Or,
                };
                Ok(three_valued(k, a, b))
            }
            _ => Err(format!("{op} of {:?} and {:?}", a.sql, b.sql)),
        };
    }
    let valid = both_valid(&a, &b);
    Ok(strict_binary(op, a, b)?.with_valid(valid))
}

/// `a op b` of values, for an `op` other than AND and OR.
fn strict_binary(op: Operator, a: Expr, b: Expr) -> Result<Expr, String> {
    use Operator as O;
    let cmp = match op {
        O::Eq => Some(BinaryOp::Eq),
        O::NotEq => Some(BinaryOp::Ne),
        O::Lt => Some(BinaryOp::Lt),
        O::LtEq => Some(BinaryOp::Le),
        O::Gt => Some(BinaryOp::Gt),
        O::GtEq => Some(BinaryOp::Ge),
        _ => None,
    };
    let decimal = matches!(a.sql, Sql::Decimal(..)) || matches!(b.sql, Sql::Decimal(..));
    if let Some(k) = cmp {
        let (a, b) = match decimal {
            true => {
                let (a, b, _) = same_scale(a, b)?;
                (a, b)
            }
            false if a.sql == b.sql => (a, b),
            false => return Err(format!("{op} of {:?} and {:?}", a.sql, b.sql)),
        };
        return Ok(Expr::new(
            Node::Compare(k, Box::new(a), Box::new(b)),
            Sql::Bool,
        ));
    }
    let k = match op {
        O::Plus => BinaryOp::Add,
        O::Minus => BinaryOp::Sub,
        O::Multiply => BinaryOp::Mul,
        O::Divide => BinaryOp::Div,
        _ => return Err(format!("operator {op}")),
    };
    if decimal {
        let scale = |e: &Expr| match e.sql {
            Sql::Decimal(_, s) => Ok(s),
            Sql::Int(_) => Ok(0),
            t => Err(format!("{op} of a decimal and {t:?}")),
        };
        return match k {
            BinaryOp::Add | BinaryOp::Sub => {
                let (a, b, s) = same_scale(a, b)?;
                Ok(Expr::new(
                    Node::Binary(k, Box::new(a), Box::new(b)),
                    Sql::Decimal(38, s),
                ))
            }
            BinaryOp::Mul => {
                let s = scale(&a)? + scale(&b)?;
                let wide = |e: Expr| match e.sql {
                    Sql::Decimal(..) => Ok(e),
                    _ => convert(e, Sql::Decimal(38, 0)),
                };
                Ok(Expr::new(
                    Node::Binary(k, Box::new(wide(a)?), Box::new(wide(b)?)),
                    Sql::Decimal(38, s),
                ))
            }
            _ => Err(format!("decimal {op}")),
        };
    }
    match (a.sql, b.sql) {
        (Sql::Float(x), Sql::Float(y)) if x == y => {
            let sql = a.sql;
            Ok(Expr::new(Node::Binary(k, Box::new(a), Box::new(b)), sql))
        }
        (Sql::Int(x), Sql::Int(y)) if x == y && k != BinaryOp::Div => {
            let sql = a.sql;
            Ok(Expr::new(Node::Binary(k, Box::new(a), Box::new(b)), sql))
        }
        (x, y) => Err(format!("{op} of {x:?} and {y:?}")),
    }
}
