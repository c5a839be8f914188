//! [`KilnRule`]: finds DataFusion's partial aggregates over a filter and a projection and
//! puts a [`KilnExec`] in their place.

use crate::aggregate::{Aggregate, Fun, Kind};
use crate::exec::{KilnDeclinedExec, KilnExec};
use crate::expr::{translate, validity, Expr, Scoped, Sql};
use crate::fused::{renumber, Fused, Source};
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::ScalarValue as Sv;
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, InListExpr, LikeExpr, Literal};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;
use std::sync::Arc;

/// A physical optimizer rule that replaces each partial aggregate (`AggregateExec` in
/// `Partial` mode, with or without `GROUP BY` on columns), together with the projection and
/// the filter under it, by a [`KilnExec`] running them as fused kiln queries on the rule's
/// [`kiln::Context`] (one per batch on CPUs; see [`KilnRule::rows_per_query`]). A partial
/// aggregate it cannot take stays DataFusion's, under a [`KilnDeclinedExec`] that says why
/// in EXPLAIN.
///
/// What it takes: filters and projections of arithmetic (`+ - *`, and `/` on floats),
/// comparisons, `AND`/`OR`/`NOT`, `BETWEEN`, `IN` lists, `CASE` with `ELSE`, `CAST` between
/// numeric types, date, decimal and NULL literals, `IS [NOT] NULL`, over columns of
/// integers, floats, dates, booleans and Decimal128 (as scaled `i64`s), NOT NULL or not (a
/// column that may be NULL is read with its validity: NULL propagates through arithmetic,
/// comparisons and casts, `AND`/`OR`/`NOT` follow SQL's three-valued logic, a filter keeps
/// the rows whose predicate is TRUE), and comparisons of strings, NULL or not (`=`, `<>`,
/// `<`, ..., `LIKE`, `IN`), which DataFusion computes on the host for each batch and kiln
/// reads as booleans with their validity; `SUM`, `COUNT`, `MIN`, `MAX` (not of floats) and `AVG`, which skip NULLs
/// (`COUNT` of a column of any type); `GROUP BY` on columns of any type, NULL or not (NULL is
/// one group), and on `date_part`/`extract` and `substr` of them (DataFusion computes those
/// keys on the host),
/// any number of groups (the host codes the keys; a batch of more than 1024 groups is folded
/// as one kiln query per 1024 of them). Integer and decimal results are exact: an expression
/// whose bounds could overflow `i64` fails the query.
#[derive(Clone, Debug)]
pub struct KilnRule {
    ctx: kiln::Context,
    /// Rows per kiln query as set, or `None` for the device's default.
    rows_per_query: Option<usize>,
}

impl KilnRule {
    /// The rule, running what it takes on `ctx`'s device: on a CPU one kiln query per input
    /// batch, on a GPU one per run of batches of about 2^21 rows (each query pays copies to
    /// and from the device and a wait for its result).
    pub fn new(ctx: kiln::Context) -> KilnRule {
        KilnRule {
            ctx,
            rows_per_query: None,
        }
    }

    /// The rule, gathering the input batches of each [`KilnExec`] into runs of at least
    /// `rows` rows (1: each batch alone) and running one kiln query per run; the last run
    /// takes what is left. More rows per query spread the device's fixed cost per query
    /// over more rows and hold more of them in host memory at once, as one copy. The setting
    /// travels with each [`KilnExec`] ([`KilnExec::rows_per_query_set`]), so kiln-ballista's
    /// executors use it too; a rule without it uses the default of the device that runs the
    /// query.
    pub fn rows_per_query(self, rows: usize) -> KilnRule {
        KilnRule {
            rows_per_query: Some(rows.max(1)),
            ..self
        }
    }
}

impl PhysicalOptimizerRule for KilnRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(agg) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            if *agg.mode() != AggregateMode::Partial {
                return Ok(Transformed::no(node));
            }
            Ok(Transformed::yes(
                match fuse(&node, agg, &self.ctx, self.rows_per_query) {
                    Ok(exec) => Arc::new(exec) as Arc<dyn ExecutionPlan>,
                    Err(why) => Arc::new(KilnDeclinedExec::new(node.clone(), why)),
                },
            ))
        })
        .data()
    }

    fn name(&self) -> &str {
        "kiln"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `e` (over the columns whose host expressions are `host`) as an expression over the
/// operator's input that DataFusion computes on the host for every row without failing: a
/// column, a literal, or `date_part` or `substr` (with a literal length of at least 0) of
/// them (TPC-H's `extract(year from ...)` and `substring(c_phone from 1 for 2)` keys).
/// Computed before the filter, on rows it may drop, so nothing that can fail (a cast, a
/// division) qualifies. It may be NULL where its columns are.
fn on_host(
    e: &Arc<dyn PhysicalExpr>,
    host: &[Option<Arc<dyn PhysicalExpr>>],
) -> Option<Arc<dyn PhysicalExpr>> {
    if let Some(c) = e.downcast_ref::<Column>() {
        return host.get(c.index())?.clone();
    }
    if e.downcast_ref::<Literal>()
        .is_some_and(|l| !l.value().is_null())
    {
        return Some(e.clone());
    }
    let f = e.downcast_ref::<ScalarFunctionExpr>()?;
    let count = |i: usize| {
        f.args().get(i).is_none_or(|a| {
            a.downcast_ref::<Literal>()
                .is_some_and(|l| matches!(l.value(), Sv::Int64(Some(n)) if *n >= 0))
        })
    };
    // `substr` fails on a negative length only.
    let safe = match f.name() {
        "date_part" => true,
        "substr" => f.args().len() <= 3 && count(2),
        _ => false,
    };
    if !safe {
        return None;
    }
    let args = f
        .args()
        .iter()
        .map(|a| on_host(a, host))
        .collect::<Option<Vec<_>>>()?;
    e.clone().with_new_children(args).ok()
}

/// Whether `e`, computed on the host over `schema`, is a string.
fn is_string(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> bool {
    matches!(
        e.data_type(schema),
        Ok(DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
    )
}

/// `e` (over columns whose host expressions are `host`) with each comparison of strings
/// (`=`, `<>`, `<`, ..., `LIKE`, `IN` lists of literals) over what the host computes without
/// failing ([`on_host`]) replaced by the column `leaf` returns for the comparison rewritten
/// over the operator's input (`schema`): DataFusion computes those on the host, kiln the
/// rest.
fn hoist(
    e: &Arc<dyn PhysicalExpr>,
    host: &[Option<Arc<dyn PhysicalExpr>>],
    schema: &Schema,
    leaf: &mut dyn FnMut(Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr>,
) -> Arc<dyn PhysicalExpr> {
    let strings = |parts: &[&Arc<dyn PhysicalExpr>]| {
        let parts = parts
            .iter()
            .map(|p| on_host(p, host))
            .collect::<Option<Vec<_>>>()?;
        parts.iter().any(|p| is_string(p, schema)).then_some(parts)
    };
    let comparison = if let Some(b) = e.downcast_ref::<BinaryExpr>() {
        use datafusion::logical_expr::Operator::*;
        match b.op() {
            Eq | NotEq | Lt | LtEq | Gt | GtEq => strings(&[b.left(), b.right()]),
            _ => None,
        }
    } else if let Some(l) = e.downcast_ref::<LikeExpr>() {
        strings(&[l.expr(), l.pattern()])
    } else if let Some(i) = e.downcast_ref::<InListExpr>() {
        let mut parts = vec![i.expr()];
        parts.extend(i.list());
        strings(&parts)
    } else {
        None
    };
    if let Some(children) = comparison {
        if let Ok(over_input) = e.clone().with_new_children(children) {
            return leaf(over_input);
        }
    }
    let children: Vec<_> = e
        .children()
        .into_iter()
        .map(|c| hoist(c, host, schema, leaf))
        .collect();
    match children.is_empty() {
        true => e.clone(),
        false => e
            .clone()
            .with_new_children(children)
            .unwrap_or_else(|_| e.clone()),
    }
}

/// The boolean columns the host gives kiln beside the operator's input (over `schema`),
/// numbered after its columns: the validity of what may be NULL, and the predicates
/// DataFusion computes ([`hoist`]).
struct Leaves<'s> {
    schema: &'s Schema,
    sources: Vec<Source>,
}

impl Leaves<'_> {
    /// A new leaf's column.
    fn leaf(&mut self, source: Source) -> Expr {
        self.sources.push(source);
        Expr::input(
            self.schema.fields().len() + self.sources.len() - 1,
            Sql::Bool,
        )
    }

    /// Where `e`, computed on the host, is not NULL: a leaf of its validity if it may be NULL.
    fn validity(&mut self, e: &Arc<dyn PhysicalExpr>) -> Option<Expr> {
        e.nullable(self.schema).unwrap_or(true).then(|| {
            let source = match e.downcast_ref::<Column>() {
                Some(c) => Source::Column(c.index()),
                None => Source::Host(e.clone()),
            };
            self.leaf(Source::Valid(Box::new(source)))
        })
    }

    /// `e` with its comparisons of strings hoisted ([`hoist`]): each a leaf, added to `scope`.
    fn hoisted(
        &mut self,
        e: &Arc<dyn PhysicalExpr>,
        scope: &mut Vec<Scoped>,
        host: &[Option<Arc<dyn PhysicalExpr>>],
    ) -> Arc<dyn PhysicalExpr> {
        hoist(e, host, self.schema, &mut |predicate| {
            let valid = self.validity(&predicate);
            let value = self.leaf(Source::Host(predicate));
            scope.push(Scoped::Value(value.with_valid(valid)));
            Arc::new(Column::new("host predicate", scope.len() - 1))
        })
    }
}

/// A [`KilnExec`] doing what `agg` (the plan node `node`) and the filter and projection under
/// it do, on `ctx`'s device, or why not.
fn fuse(
    node: &Arc<dyn ExecutionPlan>,
    agg: &AggregateExec,
    ctx: &kiln::Context,
    rows_per_query: Option<usize>,
) -> std::result::Result<KilnExec, String> {
    let group = agg.group_expr();
    if !group.is_single() {
        return Err("GROUPING SETS".into());
    }
    if agg.filter_expr().iter().any(|f| f.is_some()) {
        return Err("an aggregate with FILTER".into());
    }
    // The operators kiln replaces, from the aggregate down, and the input under them.
    let mut operators = vec![node.clone()];
    let mut under = agg.input();
    let projection = under.downcast_ref::<ProjectionExec>();
    if let Some(p) = projection {
        operators.push(under.clone());
        under = p.input();
    }
    let filter = under.downcast_ref::<FilterExec>();
    if let Some(f) = filter {
        operators.push(under.clone());
        under = f.input();
    }
    let input = under.clone();
    let schema = input.schema();
    // What DataFusion computes on the host from the operator's input, for each column in
    // scope (every input column; a projection adds what [`on_host`] computes): group keys and
    // the input of hoisted predicates.
    let mut host: Vec<Option<Arc<dyn PhysicalExpr>>> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| Some(Arc::new(Column::new(f.name(), i)) as Arc<dyn PhysicalExpr>))
        .collect();
    let width = schema.fields().len();
    let mut leaves = Leaves {
        schema: &schema,
        sources: Vec::new(),
    };
    let mut scope: Vec<Scoped> = Vec::with_capacity(width);
    for (i, f) in schema.fields().iter().enumerate() {
        let valid = leaves.validity(&(Arc::new(Column::new(f.name(), i)) as _));
        scope.push(match Sql::of(f.data_type()) {
            Ok(sql) => Scoped::Value(Expr::input(i, sql).with_valid(valid)),
            Err(t) => Scoped::Opaque {
                why: format!("of {t}"),
                valid,
            },
        });
    }
    let mut predicate = None;
    if let Some(f) = filter {
        let p = translate(&leaves.hoisted(f.predicate(), &mut scope, &host), &scope)?;
        if p.sql != Sql::Bool {
            return Err("a filter that is not a boolean".into());
        }
        // A row whose predicate is NULL is dropped.
        predicate = Some(p.known_true());
        if let Some(keep) = f.projection() {
            scope = keep.iter().map(|&i| scope[i].clone()).collect();
            host = keep.iter().map(|&i| host[i].clone()).collect();
        }
    }
    if let Some(p) = projection {
        let mut projected = Vec::with_capacity(p.expr().len());
        for pe in p.expr() {
            let on_host = on_host(&pe.expr, &host);
            let scoped = match pe.expr.downcast_ref::<Column>() {
                Some(c) => scope[c.index()].clone(),
                None => match translate(&leaves.hoisted(&pe.expr, &mut scope, &host), &scope) {
                    Ok(v) => Scoped::Value(v),
                    // A value only the host computes may still be a group key.
                    Err(why) => match &on_host {
                        Some(e) => Scoped::Opaque {
                            why: format!("computed on the host ({why})"),
                            valid: leaves.validity(e),
                        },
                        None => return Err(why),
                    },
                },
            };
            projected.push((scoped, on_host));
        }
        (scope, host) = projected.into_iter().unzip();
    }
    // The host computes the keys, NULL one value of them.
    let keys = group
        .expr()
        .iter()
        .map(|(e, name)| {
            on_host(e, &host).ok_or_else(|| match e.downcast_ref::<Column>() {
                Some(_) => format!("GROUP BY on the computed column {name}"),
                None => format!("GROUP BY on the expression {e}"),
            })
        })
        .collect::<std::result::Result<Vec<_>, String>>()?;
    let mut aggregates = Vec::new();
    for a in agg.aggr_expr() {
        let name = a.fun().name().to_lowercase();
        let kind = Kind::of(&name).ok_or_else(|| format!("the aggregate {name}"))?;
        if a.is_distinct() || !a.order_bys().is_empty() {
            return Err(format!("{name} with DISTINCT or ORDER BY"));
        }
        let args = a.expressions();
        // The argument's value and where it is not NULL: COUNT counts those rows, the other
        // aggregates skip the rest.
        let (arg, valid) = match args.as_slice() {
            // Of any type (a string's validity too).
            [e] if kind == Kind::Count => (
                None,
                validity(&leaves.hoisted(e, &mut scope, &host), &scope)?,
            ),
            [e] => {
                let a = translate(&leaves.hoisted(e, &mut scope, &host), &scope)?;
                let valid = a.validity();
                (Some(a.value()), valid)
            }
            _ => return Err(format!("{name} of {} arguments", args.len())),
        };
        let arg = match kind {
            Kind::Count => valid.clone().map(Expr::count_of),
            _ => arg,
        };
        match (&kind, arg.as_ref().map(|a| a.sql)) {
            (Kind::Min | Kind::Max, Some(Sql::Float(_))) => {
                return Err(format!("{name} of floats (NaN order)"))
            }
            (Kind::Sum | Kind::Avg, Some(Sql::Int(kiln::ir::ScalarType::U64))) => {
                return Err(format!("{name} of UInt64"))
            }
            (_, Some(Sql::Bool)) => return Err(format!("{name} of booleans")),
            _ => {}
        }
        let state = a
            .state_fields()
            .map_err(|e| e.to_string())?
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let fun = Fun::new(kind, arg).ok_or_else(|| format!("{name} without an argument"))?;
        aggregates.push(Aggregate {
            fun,
            valid: valid.filter(|_| kind != Kind::Count),
            state,
            text: a.name().to_string(),
        });
    }
    // The input columns the expressions read, numbered as kiln's query sees them.
    let mut used = Vec::new();
    for e in predicate.iter().chain(
        aggregates
            .iter()
            .flat_map(|a| a.fun.arg().into_iter().chain(&a.valid)),
    ) {
        e.inputs(&mut used);
    }
    used.sort_unstable();
    used.dedup();
    let position = |i: usize| used.binary_search(&i).unwrap_or(0);
    if let Some(p) = &mut predicate {
        renumber(p, &position);
    }
    for a in &mut aggregates {
        if let Some(arg) = a.fun.arg_mut() {
            renumber(arg, &position);
        }
        if let Some(valid) = &mut a.valid {
            renumber(valid, &position);
        }
    }
    let inputs = used
        .iter()
        .map(|&i| match i.checked_sub(width) {
            None => Sql::of(schema.field(i).data_type()).map(|s| (Source::Column(i), s)),
            Some(leaf) => Ok((leaves.sources[leaf].clone(), Sql::Bool)),
        })
        .collect::<std::result::Result<Vec<_>, String>>()?;
    let text = format!(
        "filter=[{}], group_by=[{}], aggr=[{}]",
        filter
            .map(|f| f.predicate().to_string())
            .unwrap_or_default(),
        group
            .expr()
            .iter()
            .map(|(_, n)| n.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        aggregates
            .iter()
            .map(|a| a.text.as_str())
            .collect::<Vec<_>>()
            .join(", "),
    );
    let fused = Fused {
        inputs,
        filter: predicate,
        keys,
        aggregates,
    };
    Ok(KilnExec::new(
        input,
        operators,
        fused,
        text,
        agg.schema(),
        ctx.clone(),
        rows_per_query,
    ))
}
