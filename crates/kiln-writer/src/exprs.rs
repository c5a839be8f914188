//! The walk every writer makes over an expression: which components it has and which
//! operation makes each, with the language's spelling supplied by [`Syntax`].

use crate::{component_name, temp_name, WriteError};
use kiln_ir::{
    AtomicOp, Builtin, Expr, Handle, MathFn, Memory, ScalarType, ScalarValue, SubgroupOp, Type,
    TypedBody, UnaryOp,
};

/// An expression as written: one string per scalar component (names of earlier temporaries,
/// operators and calls), or one call of a device function returning several components.
#[derive(Debug, Default)]
pub struct Written {
    /// Statements that must come before the expression's temporaries are declared.
    pub pre: Vec<String>,
    /// Each component's text.
    pub comps: Vec<String>,
    /// A call of a device function that returns a struct of components instead.
    pub call: Option<StructCall>,
}

impl Written {
    /// An expression made of `comps`.
    pub fn new(comps: Vec<String>) -> Written {
        Written {
            comps,
            ..Written::default()
        }
    }

    /// A one-component expression.
    pub fn one(text: String) -> Written {
        Written::new(vec![text])
    }
}

/// A call of a device function that returns several components.
#[derive(Debug)]
pub struct StructCall {
    /// The call's text.
    pub call: String,
    /// The (renamed) function's name.
    pub function: String,
}

/// An atomic read-modify-write, its operands already written.
pub struct AtomicCall<'a> {
    /// The memory it works on.
    pub memory: Memory,
    /// The expression it is (for names of its temporaries).
    pub handle: Handle,
    /// The element type.
    pub ty: ScalarType,
    /// The operation.
    pub op: AtomicOp,
    /// The element index.
    pub index: &'a str,
    /// The operand.
    pub value: &'a str,
    /// The expected value of a compare-exchange.
    pub compare: Option<&'a str>,
}

/// A subgroup operation, its operands already written.
pub struct SubgroupCall<'a> {
    /// The operation.
    pub op: SubgroupOp,
    /// The operand's type.
    pub ty: ScalarType,
    /// The operand.
    pub value: &'a str,
    /// The lane, for operations that take one.
    pub lane: Option<&'a str>,
}

/// How one target language spells each scalar operation. [`components`] decides which
/// operation makes each component; an implementation writes it, with kiln's rules (see
/// [`crate::rules`]) spelled out.
pub trait Syntax {
    /// A literal.
    fn literal(&mut self, v: ScalarValue) -> String;
    /// Component `name` (of type `s`) of a parameter of the body `cx`.
    fn param(&mut self, cx: &TypedBody, name: String, s: ScalarType) -> String {
        let _ = (cx, s);
        name
    }
    /// Element `i` of the private array `array` of `len` elements of `s`, where the index
    /// may be out of bounds (which reads zero).
    fn checked_local_index(&mut self, array: &str, i: &str, len: u32, s: ScalarType) -> String;
    /// Element `index` of `memory`, `checked` when the index may be out of bounds; `h` is the
    /// load itself.
    fn load(
        &mut self,
        cx: &TypedBody,
        memory: Memory,
        index: &str,
        h: Handle,
        checked: bool,
    ) -> Result<Written, WriteError>;
    /// The length of `memory`.
    fn len(&mut self, cx: &TypedBody, memory: Memory) -> Result<String, WriteError>;
    /// `a op b` on components of type `s`.
    fn binary(
        &mut self,
        op: kiln_ir::BinaryOp,
        s: ScalarType,
        a: &str,
        b: &str,
    ) -> Result<String, WriteError>;
    /// `op x` on a component of type `s`.
    fn unary(&mut self, op: UnaryOp, s: ScalarType, x: &str) -> String;
    /// `cond ? accept : reject`.
    fn select(&mut self, cond: &str, accept: &str, reject: &str) -> String;
    /// `x as to`.
    fn cast(&mut self, x: &str, from: ScalarType, to: ScalarType) -> String;
    /// The bits of `x` as a `to`.
    fn bitcast(&mut self, x: &str, from: ScalarType, to: ScalarType) -> String;
    /// `fun` of `args` (components of type `s`).
    fn math(&mut self, fun: MathFn, s: ScalarType, args: &[String]) -> Result<String, WriteError>;
    /// A builtin value.
    fn builtin(&mut self, b: Builtin) -> String;
    /// An atomic operation; its result is the element's old value.
    fn atomic(&mut self, cx: &TypedBody, a: AtomicCall) -> Result<Written, WriteError>;
    /// A subgroup operation.
    fn subgroup(&mut self, s: SubgroupCall) -> Result<String, WriteError>;
    /// Arguments a call of device function `function` takes before its own (CUDA's lane
    /// mask); none by default.
    fn call_prefix(&mut self, function: usize) -> Option<String> {
        let _ = function;
        None
    }
}

/// Expression `h` of the body `cx`, written by `w`: each component, or the struct call.
pub fn components<S: Syntax + ?Sized>(
    w: &mut S,
    cx: &TypedBody,
    h: Handle,
) -> Result<Written, WriteError> {
    let ty = cx.ty(h)?;
    let n = ty.flatten().len();
    let u32t = Type::Scalar(ScalarType::U32);
    let scalar_of = |t: &Type, what: &str| {
        t.component()
            .ok_or_else(|| WriteError(format!("{what} on a non-scalar")))
    };
    let per_component = |t: &Type,
                         f: &mut dyn FnMut(usize) -> Result<String, WriteError>|
     -> Result<Written, WriteError> {
        (0..t.flatten().len())
            .map(f)
            .collect::<Result<Vec<_>, _>>()
            .map(Written::new)
    };
    Ok(match &cx.body.exprs[h.index()] {
        Expr::Literal(v) => Written::one(w.literal(*v)),
        Expr::Param(i) => {
            let name = cx.params[*i as usize].name.clone();
            let flat = ty.flatten();
            Written::new(
                flat.iter()
                    .enumerate()
                    .map(|(c, (s, _))| w.param(cx, component_name(&name, c, n), *s))
                    .collect(),
            )
        }
        Expr::LocalGet(l) => {
            let name = cx.local_name(l.0 as usize);
            Written::new((0..n).map(|c| component_name(&name, c, n)).collect())
        }
        Expr::LocalIndex { local, index } => {
            let Type::Array(e, len) = &cx.body.locals[local.0 as usize].ty else {
                return Err(WriteError("not an array local".into()));
            };
            let name = cx.local_name(local.0 as usize);
            let i = temp_name(*index, 0, &u32t);
            let checked = !cx.in_bounds.load(h);
            let flat = e.flatten();
            Written::new(
                flat.iter()
                    .enumerate()
                    .map(|(c, (s, _))| {
                        let array = component_name(&name, c, flat.len());
                        match checked {
                            true => w.checked_local_index(&array, &i, *len, *s),
                            false => format!("{array}[{i}]"),
                        }
                    })
                    .collect(),
            )
        }
        Expr::Load { memory, index } => w.load(
            cx,
            *memory,
            &temp_name(*index, 0, &u32t),
            h,
            !cx.in_bounds.load(h),
        )?,
        Expr::Len(m) => Written::one(w.len(cx, *m)?),
        Expr::Binary { op, lhs, rhs } => {
            let lt = cx.ty(*lhs)?;
            let s = scalar_of(&lt, "binary")?;
            per_component(&lt, &mut |c| {
                w.binary(*op, s, &temp_name(*lhs, c, &lt), &temp_name(*rhs, c, &lt))
            })?
        }
        Expr::Unary { op, arg } => {
            let s = scalar_of(&ty, "unary")?;
            per_component(&ty, &mut |c| Ok(w.unary(*op, s, &temp_name(*arg, c, &ty))))?
        }
        Expr::Select {
            cond,
            accept,
            reject,
        } => {
            let c = temp_name(*cond, 0, &Type::Scalar(ScalarType::Bool));
            per_component(&ty, &mut |i| {
                Ok(w.select(&c, &temp_name(*accept, i, &ty), &temp_name(*reject, i, &ty)))
            })?
        }
        Expr::Cast { arg, to } => {
            let at = cx.ty(*arg)?;
            let from = scalar_of(&at, "cast")?;
            per_component(&at, &mut |c| {
                Ok(w.cast(&temp_name(*arg, c, &at), from, *to))
            })?
        }
        Expr::Bitcast { arg, to } => {
            let at = cx.ty(*arg)?;
            let from = scalar_of(&at, "bitcast")?;
            per_component(&at, &mut |c| {
                Ok(w.bitcast(&temp_name(*arg, c, &at), from, *to))
            })?
        }
        Expr::Math { fun, args } => {
            let at = cx.ty(args[0])?;
            let s = scalar_of(&at, "math")?;
            per_component(&at, &mut |c| {
                let xs: Vec<String> = args.iter().map(|a| temp_name(*a, c, &at)).collect();
                w.math(*fun, s, &xs)
            })?
        }
        Expr::Builtin(b) => Written::one(w.builtin(*b)),
        Expr::Compose { parts, .. } => {
            let mut comps = Vec::new();
            for p in parts {
                let pt = cx.ty(*p)?;
                comps.extend((0..pt.flatten().len()).map(|c| temp_name(*p, c, &pt)));
            }
            Written::new(comps)
        }
        Expr::Extract { base, index } => {
            let bt = cx.ty(*base)?;
            let range = bt
                .component_range(*index)
                .ok_or_else(|| WriteError(format!("{bt} has no component {index}")))?;
            Written::new(range.map(|c| temp_name(*base, c, &bt)).collect())
        }
        Expr::Atomic {
            memory,
            index,
            op,
            value,
            compare,
        } => {
            let s = ty
                .as_scalar()
                .ok_or_else(|| WriteError("atomic on a non-scalar".into()))?;
            let index = temp_name(*index, 0, &u32t);
            let value = temp_name(*value, 0, &ty);
            let compare = compare.map(|c| temp_name(c, 0, &ty));
            let call = AtomicCall {
                memory: *memory,
                handle: h,
                ty: s,
                op: *op,
                index: &index,
                value: &value,
                compare: compare.as_deref(),
            };
            w.atomic(cx, call)?
        }
        Expr::Subgroup { op, arg, lane } => {
            let s = cx
                .ty(*arg)?
                .as_scalar()
                .ok_or_else(|| WriteError("subgroup op on a non-scalar".into()))?;
            let value = temp_name(*arg, 0, &Type::Scalar(s));
            let lane = lane.map(|l| temp_name(l, 0, &u32t));
            Written::one(w.subgroup(SubgroupCall {
                op: *op,
                ty: s,
                value: &value,
                lane: lane.as_deref(),
            })?)
        }
        Expr::Call { function, args } => {
            let f = &cx.kernel.functions[function.0 as usize];
            let mut flat_args: Vec<String> =
                w.call_prefix(function.0 as usize).into_iter().collect();
            for a in args {
                let at = cx.ty(*a)?;
                flat_args.extend((0..at.flatten().len()).map(|c| temp_name(*a, c, &at)));
            }
            let call = format!("{}({})", f.name, flat_args.join(", "));
            match n {
                1 => Written::one(call),
                _ => Written {
                    call: Some(StructCall {
                        call,
                        function: f.name.clone(),
                    }),
                    ..Written::default()
                },
            }
        }
    })
}
