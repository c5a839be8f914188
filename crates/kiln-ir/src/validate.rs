//! The validator: types every expression, checks operands, scopes, memory access rights and
//! control flow, and reports the first problem with where it is and why.

use crate::info::{BodyInfo, KernelInfo};
use crate::ir::*;
use crate::native::NativeArg;
use crate::types::{ScalarType, Type};
use std::fmt;

/// A validation or build error: what is wrong, where, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct IrError {
    /// Kernel name.
    pub kernel: String,
    /// Device function name, when the error is inside one.
    pub function: Option<String>,
    /// Path to the statement or expression (`stmt 2 > loop body > stmt 0`).
    pub location: String,
    /// What is wrong and why.
    pub message: String,
}

impl fmt::Display for IrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid kernel `{}`", self.kernel)?;
        if let Some(func) = &self.function {
            write!(f, ", device function `{func}`")?;
        }
        if !self.location.is_empty() {
            write!(f, ", at {}", self.location)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// True if `s` is a valid identifier for every target language: ASCII letter or `_` first,
/// then ASCII letters, digits or `_`, at most 64 characters, not starting with `__`.
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s.len() <= 64
        && !s.starts_with("__")
}

/// The message for the first name that `names` (what each is, and its name) holds twice.
fn first_repeat<'n>(names: impl Iterator<Item = (&'static str, &'n String)>) -> Option<String> {
    let mut seen: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for (what, name) in names {
        if let Some(before) = seen.insert(name.as_str(), what) {
            return Some(format!(
                "the name `{name}` is given to a {before} and to a {what}; names must differ"
            ));
        }
    }
    None
}

/// Validates a kernel and every device function; returns the first error found (names
/// given twice among the parameters and shared arrays, or among a device function's
/// parameters, among them), or what validation found out ([`KernelInfo`]), which backends
/// use instead of working it out again.
pub fn validate(kernel: &Kernel) -> Result<KernelInfo, IrError> {
    let err = |function: Option<&str>, location: String, message: String| IrError {
        kernel: kernel.name.clone(),
        function: function.map(str::to_owned),
        location,
        message,
    };
    if !is_identifier(&kernel.name) {
        return Err(err(
            None,
            String::new(),
            "kernel name is not an identifier".into(),
        ));
    }
    if kernel.options.launch_bounds == Some(0) || kernel.options.max_registers == Some(0) {
        return Err(err(
            None,
            "options".into(),
            "launch bounds and a register limit must be at least 1".into(),
        ));
    }
    for (i, p) in kernel.params.iter().enumerate() {
        if !is_identifier(&p.name) {
            return Err(err(
                None,
                format!("param {i}"),
                format!("parameter name `{}` is not an identifier", p.name),
            ));
        }
        let ty = match &p.kind {
            ParamKind::Buffer { elem, .. } | ParamKind::Value(elem) => elem,
        };
        if ty.contains_array() {
            return Err(err(None, format!("param {i}"), format!("parameter `{}` has an array type; arrays are allowed in locals and shared memory only", p.name)));
        }
    }
    for (i, s) in kernel.shared.iter().enumerate() {
        if !is_identifier(&s.name) {
            return Err(err(
                None,
                format!("shared {i}"),
                format!("shared array name `{}` is not an identifier", s.name),
            ));
        }
        if s.elem.contains_array() {
            return Err(err(
                None,
                format!("shared {i}"),
                "shared array elements may not contain arrays".into(),
            ));
        }
    }
    // Parameters and shared arrays are one namespace in every target language, as are a
    // device function's parameters and the device functions.
    let kernel_names = kernel.params.iter().map(|p| ("parameter", &p.name));
    let shared_names = kernel.shared.iter().map(|s| ("shared array", &s.name));
    if let Some(dup) = first_repeat(kernel_names.chain(shared_names)) {
        return Err(err(None, String::new(), dup));
    }
    if let Some(dup) = first_repeat(
        kernel
            .functions
            .iter()
            .map(|f| ("device function", &f.name)),
    ) {
        return Err(err(None, String::new(), dup));
    }
    for f in &kernel.functions {
        if let Some(dup) = first_repeat(f.params.iter().map(|p| ("parameter", &p.name))) {
            return Err(err(Some(&f.name), String::new(), dup));
        }
    }
    for n in &kernel.natives {
        crate::native::check_native(kernel, n)
            .map_err(|msg| err(None, format!("intrinsic `{}`", n.name), msg))?;
    }
    let mut functions = Vec::with_capacity(kernel.functions.len());
    for (fi, f) in kernel.functions.iter().enumerate() {
        if !is_identifier(&f.name) {
            return Err(err(
                Some(&f.name),
                String::new(),
                "function name is not an identifier".into(),
            ));
        }
        for p in &f.params {
            if !matches!(p.kind, ParamKind::Value(_)) {
                return Err(err(
                    Some(&f.name),
                    String::new(),
                    format!("parameter `{}`: device functions take values only", p.name),
                ));
            }
        }
        let cx = Checker {
            kernel,
            params: &f.params,
            result: f.result.as_ref(),
            callable: fi,
            is_kernel: false,
        };
        let types = cx
            .check(&f.body)
            .map_err(|(loc, msg)| err(Some(&f.name), loc, msg))?;
        functions.push(BodyInfo::new(&f.body, types));
    }
    let cx = Checker {
        kernel,
        params: &kernel.params,
        result: None,
        callable: kernel.functions.len(),
        is_kernel: true,
    };
    let types = cx
        .check(&kernel.body)
        .map_err(|(loc, msg)| err(None, loc, msg))?;
    let body = BodyInfo::new(&kernel.body, types);
    Ok(KernelInfo::new(kernel, body, functions))
}

/// Computes the type of every expression of a body (in arena order). Fails like `validate`.
pub fn expr_types(kernel: &Kernel, params: &[Param], body: &Body) -> Result<Vec<Type>, String> {
    let cx = Checker {
        kernel,
        params,
        result: None,
        callable: kernel.functions.len(),
        is_kernel: true,
    };
    cx.types(body).map_err(|(loc, msg)| format!("{loc}: {msg}"))
}

/// Where a statement is, as a chain up to the body: printed (`stmt 2 > if > stmt 0`) only
/// when a check fails.
enum Place<'p> {
    Root,
    Stmt(&'p Place<'p>, usize),
    Part(&'p Place<'p>, &'static str),
}

impl std::fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Root => Ok(()),
            Place::Stmt(Place::Root, i) => write!(f, "stmt {i}"),
            Place::Stmt(up, i) => write!(f, "{up} > stmt {i}"),
            Place::Part(up, part) => write!(f, "{up} > {part}"),
        }
    }
}

type Fail = (String, String);

struct Checker<'a> {
    kernel: &'a Kernel,
    params: &'a [Param],
    result: Option<&'a Type>,
    /// Functions with index below this may be called.
    callable: usize,
    is_kernel: bool,
}

fn scalar(s: ScalarType) -> Type {
    Type::Scalar(s)
}

const U32: Type = Type::Scalar(ScalarType::U32);
const BOOL: Type = Type::Scalar(ScalarType::Bool);

impl Checker<'_> {
    /// Checks `body`; returns its expressions' types.
    fn check(&self, body: &Body) -> Result<Vec<Type>, Fail> {
        for (i, l) in body.locals.iter().enumerate() {
            if !is_identifier(&l.name) {
                return Err((
                    format!("local {i}"),
                    format!("local name `{}` is not an identifier", l.name),
                ));
            }
        }
        let types = self.types(body)?;
        let mut scope = Scope {
            visible: vec![false; body.exprs.len()],
            evaluated: vec![false; body.exprs.len()],
        };
        self.block(body, &types, &body.block, &mut scope, 0, &Place::Root)?;
        Ok(types)
    }

    fn memory_elem(&self, m: Memory, write: bool, atomic: bool) -> Result<Type, String> {
        match m {
            Memory::Buffer(i) => match self.kernel.params.get(i as usize).map(|p| &p.kind) {
                Some(ParamKind::Buffer { elem, access }) if self.is_kernel => {
                    let ok = match access {
                        Access::Read => !write && !atomic,
                        Access::Write => write && !atomic,
                        Access::ReadWrite => true,
                    };
                    if ok {
                        Ok(elem.clone())
                    } else {
                        let name = &self.kernel.params[i as usize].name;
                        Err(format!(
                            "buffer `{name}` is declared {access:?} and may not be {}",
                            if atomic {
                                "used atomically"
                            } else if write {
                                "written"
                            } else {
                                "read"
                            }
                        ))
                    }
                }
                Some(ParamKind::Buffer { .. }) => {
                    Err("device functions may not access buffers".into())
                }
                _ => Err(format!("parameter {i} is not a buffer")),
            },
            Memory::Shared(i) => self
                .kernel
                .shared
                .get(i as usize)
                .map(|s| s.elem.clone())
                .ok_or_else(|| format!("no shared array {i}")),
        }
    }

    fn types(&self, body: &Body) -> Result<Vec<Type>, Fail> {
        let mut types: Vec<Type> = Vec::with_capacity(body.exprs.len());
        for (i, e) in body.exprs.iter().enumerate() {
            let ty = self
                .expr_type(body, &types, i, e)
                .map_err(|m| (format!("expression %{i}"), m))?;
            types.push(ty);
        }
        Ok(types)
    }

    fn expr_type(&self, body: &Body, types: &[Type], at: usize, e: &Expr) -> Result<Type, String> {
        let get = |h: &Handle| -> Result<&Type, String> {
            if h.index() >= at {
                Err(format!("operand %{} is not an earlier expression", h.0))
            } else {
                Ok(&types[h.index()])
            }
        };
        let want_u32 = |h: &Handle, what: &str| -> Result<(), String> {
            let t = get(h)?;
            if *t == U32 {
                Ok(())
            } else {
                Err(format!("{what} must be u32, found {t}"))
            }
        };
        let local = |l: &LocalId| {
            body.locals
                .get(l.0 as usize)
                .ok_or_else(|| format!("no local {}", l.0))
        };
        Ok(match e {
            Expr::Literal(v) => scalar(v.ty()),
            Expr::Param(i) => match self.params.get(*i as usize).map(|p| &p.kind) {
                Some(ParamKind::Value(t)) => t.clone(),
                Some(ParamKind::Buffer { .. }) => {
                    return Err(format!("parameter {i} is a buffer; read it with a load"))
                }
                None => return Err(format!("no parameter {i}")),
            },
            Expr::LocalGet(l) => {
                let d = local(l)?;
                if matches!(d.ty, Type::Array(..)) {
                    return Err(format!("array local `{}` must be read by element", d.name));
                }
                d.ty.clone()
            }
            Expr::LocalIndex { local: l, index } => {
                want_u32(index, "array index")?;
                match &local(l)?.ty {
                    Type::Array(elem, _) => (**elem).clone(),
                    t => return Err(format!("local of type {t} is not an array")),
                }
            }
            Expr::Load { memory, index } => {
                want_u32(index, "index")?;
                self.memory_elem(*memory, false, false)?
            }
            Expr::Len(m) => {
                self.memory_elem(*m, false, false).or_else(|_| match m {
                    Memory::Buffer(i)
                        if matches!(
                            self.kernel.params.get(*i as usize).map(|p| &p.kind),
                            Some(ParamKind::Buffer { .. })
                        ) && self.is_kernel =>
                    {
                        Ok(U32)
                    }
                    _ => Err(format!("{m:?} is not a buffer or shared array")),
                })?;
                U32
            }
            Expr::Binary { op, lhs, rhs } => {
                let (a, b) = (get(lhs)?, get(rhs)?);
                if a != b {
                    return Err(format!("operands of `{}` differ: {a} and {b}", op.symbol()));
                }
                let Some(c) = a.component() else {
                    return Err(format!(
                        "`{}` needs scalars or vectors, found {a}",
                        op.symbol()
                    ));
                };
                let ok = match op {
                    BinaryOp::Add
                    | BinaryOp::Sub
                    | BinaryOp::Mul
                    | BinaryOp::Div
                    | BinaryOp::Rem => c.is_numeric(),
                    BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => !c.is_float(),
                    BinaryOp::Shl | BinaryOp::Shr => c.is_int(),
                    BinaryOp::Eq | BinaryOp::Ne => true,
                    BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => c.is_numeric(),
                };
                if !ok {
                    return Err(format!("`{}` is not defined on {a}", op.symbol()));
                }
                if op.is_compare() {
                    match a {
                        Type::Vector(_, n) => Type::Vector(ScalarType::Bool, *n),
                        _ => BOOL,
                    }
                } else {
                    a.clone()
                }
            }
            Expr::Unary { op, arg } => {
                let a = get(arg)?;
                let Some(c) = a.component() else {
                    return Err(format!("unary {op:?} needs a scalar or vector, found {a}"));
                };
                match op {
                    UnaryOp::Neg if !c.is_numeric() => {
                        return Err(format!("negation is not defined on {a}"))
                    }
                    UnaryOp::Not if c.is_float() => {
                        return Err(format!("`!` is not defined on {a}"))
                    }
                    _ => a.clone(),
                }
            }
            Expr::Select {
                cond,
                accept,
                reject,
            } => {
                if *get(cond)? != BOOL {
                    return Err("select condition must be bool".into());
                }
                let (a, b) = (get(accept)?, get(reject)?);
                if a != b {
                    return Err(format!("select arms differ: {a} and {b}"));
                }
                a.clone()
            }
            Expr::Cast { arg, to } => match get(arg)? {
                Type::Scalar(_) => scalar(*to),
                Type::Vector(_, n) => Type::Vector(*to, *n),
                t => return Err(format!("cannot cast {t}")),
            },
            Expr::Bitcast { arg, to } => match get(arg)? {
                Type::Scalar(s)
                    if s.size() == to.size()
                        && *s != ScalarType::Bool
                        && *to != ScalarType::Bool =>
                {
                    scalar(*to)
                }
                Type::Vector(s, n) if s.size() == to.size() && *to != ScalarType::Bool => {
                    Type::Vector(*to, *n)
                }
                t => {
                    return Err(format!(
                        "cannot bitcast {t} to {to}: sizes differ or bool involved"
                    ))
                }
            },
            Expr::Math { fun, args } => {
                if args.len() != fun.arity() {
                    return Err(format!(
                        "{} takes {} arguments, found {}",
                        fun.name(),
                        fun.arity(),
                        args.len()
                    ));
                }
                let first = get(&args[0])?.clone();
                for a in &args[1..] {
                    if *get(a)? != first {
                        return Err(format!("arguments of {} differ in type", fun.name()));
                    }
                }
                let Some(c) = first.component() else {
                    return Err(format!(
                        "{} needs scalars or vectors, found {first}",
                        fun.name()
                    ));
                };
                if !(c.is_float() || (c.is_int() && fun.allows_int())) {
                    return Err(format!("{} is not defined on {first}", fun.name()));
                }
                if fun.returns_bool() {
                    match first {
                        Type::Vector(_, n) => Type::Vector(ScalarType::Bool, n),
                        _ => BOOL,
                    }
                } else {
                    first
                }
            }
            Expr::Builtin(_) => U32,
            Expr::Compose { ty, parts } => {
                let want: Vec<Type> = match ty {
                    Type::Vector(s, n)
                        if (2..=4).contains(n) && s.is_numeric()
                            || matches!(ty, Type::Vector(ScalarType::Bool, 2..=4)) =>
                    {
                        vec![scalar(ty.component().unwrap()); *n as usize]
                    }
                    Type::Struct(st) => st.fields.iter().map(|f| f.ty.clone()).collect(),
                    t => return Err(format!("cannot compose a {t}")),
                };
                if want.len() != parts.len() {
                    return Err(format!(
                        "{ty} needs {} parts, found {}",
                        want.len(),
                        parts.len()
                    ));
                }
                for (w, p) in want.iter().zip(parts) {
                    if get(p)? != w {
                        return Err(format!("part of {ty} should be {w}, found {}", get(p)?));
                    }
                }
                ty.clone()
            }
            Expr::Extract { base, index } => match get(base)? {
                Type::Vector(s, n) if *index < *n as u32 => scalar(*s),
                Type::Struct(st) if (*index as usize) < st.fields.len() => {
                    st.fields[*index as usize].ty.clone()
                }
                t => return Err(format!("{t} has no component {index}")),
            },
            Expr::Atomic {
                memory,
                index,
                op,
                value,
                compare,
            } => {
                want_u32(index, "index")?;
                let elem = self.memory_elem(*memory, true, true)?;
                let v = get(value)?;
                if *v != elem {
                    return Err(format!("atomic value is {v}, element is {elem}"));
                }
                let ok = match elem {
                    Type::Scalar(s) if s.is_int() && s.size() >= 4 => true,
                    Type::Scalar(ScalarType::F32) => {
                        matches!(op, AtomicOp::Add | AtomicOp::Exchange)
                    }
                    _ => false,
                };
                if !ok {
                    return Err(format!("atomic {op:?} is not supported on {elem} (32/64-bit integers; f32 add and exchange)"));
                }
                match (op, compare) {
                    (AtomicOp::CompareExchange, Some(c)) if *get(c)? == elem => {}
                    (AtomicOp::CompareExchange, _) => {
                        return Err(
                            "compare-exchange needs a compare value of the element type".into()
                        )
                    }
                    (_, Some(_)) => {
                        return Err("only compare-exchange takes a compare value".into())
                    }
                    _ => {}
                }
                elem
            }
            Expr::Subgroup { op, arg, lane } => {
                let a = get(arg)?.clone();
                if op.takes_lane() {
                    match lane {
                        Some(l) => want_u32(l, "lane")?,
                        None => return Err(format!("{op:?} needs a lane operand")),
                    }
                } else if lane.is_some() {
                    return Err(format!("{op:?} takes no lane operand"));
                }
                match op {
                    SubgroupOp::Ballot | SubgroupOp::All | SubgroupOp::Any => {
                        if a != BOOL {
                            return Err(format!("{op:?} needs bool, found {a}"));
                        }
                        if *op == SubgroupOp::Ballot {
                            U32
                        } else {
                            BOOL
                        }
                    }
                    SubgroupOp::ReduceAdd
                    | SubgroupOp::ReduceMin
                    | SubgroupOp::ReduceMax
                    | SubgroupOp::InclusiveAdd
                    | SubgroupOp::ExclusiveAdd => match a {
                        Type::Scalar(s) if s.is_numeric() && s.size() >= 4 => a,
                        _ => return Err(format!("{op:?} needs a 32/64-bit number, found {a}")),
                    },
                    _ => match a {
                        Type::Scalar(s) if s.size() >= 4 || s == ScalarType::Bool => a,
                        _ => {
                            return Err(format!(
                                "{op:?} needs a 32/64-bit scalar or bool, found {a}"
                            ))
                        }
                    },
                }
            }
            Expr::Call { function, args } => {
                let idx = function.0 as usize;
                if idx >= self.callable {
                    return Err(format!("function {idx} is not declared before this caller (recursion is not allowed)"));
                }
                let f = &self.kernel.functions[idx];
                if f.params.len() != args.len() {
                    return Err(format!(
                        "`{}` takes {} arguments, found {}",
                        f.name,
                        f.params.len(),
                        args.len()
                    ));
                }
                for (p, a) in f.params.iter().zip(args) {
                    let ParamKind::Value(t) = &p.kind else {
                        unreachable!("checked above")
                    };
                    if get(a)? != t {
                        return Err(format!(
                            "argument `{}` of `{}` should be {t}, found {}",
                            p.name,
                            f.name,
                            get(a)?
                        ));
                    }
                }
                match &f.result {
                    Some(t) => t.clone(),
                    None => {
                        return Err(format!(
                            "`{}` returns nothing; it cannot be used as a value",
                            f.name
                        ))
                    }
                }
            }
        })
    }

    fn block(
        &self,
        body: &Body,
        types: &[Type],
        b: &Block,
        scope: &mut Scope,
        loops: usize,
        path: &Place,
    ) -> Result<(), Fail> {
        let mut added = Vec::new();
        for (i, s) in b.0.iter().enumerate() {
            let here = Place::Stmt(path, i);
            let r = self.stmt(body, types, s, scope, loops, &here, &mut added);
            if r.is_err() {
                for h in &added {
                    scope.visible[*h] = false;
                }
                return r;
            }
        }
        for h in added {
            scope.visible[h] = false;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn stmt(
        &self,
        body: &Body,
        types: &[Type],
        s: &Stmt,
        scope: &mut Scope,
        loops: usize,
        here: &Place,
        added: &mut Vec<usize>,
    ) -> Result<(), Fail> {
        let fail = |m: String| (here.to_string(), m);
        let use_ = |h: &Handle, scope: &Scope| visible(types, scope, h).map_err(fail);
        let local = |l: &LocalId| {
            body.locals
                .get(l.0 as usize)
                .ok_or_else(|| fail(format!("no local {}", l.0)))
        };
        match s {
            Stmt::Eval(h) => {
                if h.index() >= types.len() {
                    return Err(fail(format!("expression %{} does not exist", h.0)));
                }
                if scope.evaluated[h.index()] {
                    return Err(fail(format!("expression %{} is computed twice", h.0)));
                }
                for op in operands(&body.exprs[h.index()]) {
                    use_(&op, scope)?;
                }
                scope.evaluated[h.index()] = true;
                scope.visible[h.index()] = true;
                added.push(h.index());
            }
            Stmt::LocalSet { local: l, value } => {
                let d = local(l)?;
                let t = use_(value, scope)?;
                if matches!(d.ty, Type::Array(..)) {
                    return Err(fail(format!(
                        "array local `{}` must be assigned by element",
                        d.name
                    )));
                }
                if *t != d.ty {
                    return Err(fail(format!(
                        "local `{}` is {}, assigned {t}",
                        d.name, d.ty
                    )));
                }
            }
            Stmt::LocalIndexSet {
                local: l,
                index,
                value,
            } => {
                let d = local(l)?;
                if *use_(index, scope)? != U32 {
                    return Err(fail("array index must be u32".into()));
                }
                let t = use_(value, scope)?;
                match &d.ty {
                    Type::Array(e, _) if **e == *t => {}
                    ty => {
                        return Err(fail(format!(
                            "cannot store {t} into an element of local `{}` of type {ty}",
                            d.name
                        )))
                    }
                }
            }
            Stmt::Store {
                memory,
                index,
                value,
            } => {
                let elem = self.memory_elem(*memory, true, false).map_err(fail)?;
                if *use_(index, scope)? != U32 {
                    return Err(fail("index must be u32".into()));
                }
                let t = use_(value, scope)?;
                if *t != elem {
                    return Err(fail(format!("stored value is {t}, element is {elem}")));
                }
            }
            Stmt::If {
                cond,
                accept,
                reject,
            } => {
                if *use_(cond, scope)? != BOOL {
                    return Err(fail("if condition must be bool".into()));
                }
                let (then_place, else_place) = (Place::Part(here, "if"), Place::Part(here, "else"));
                self.block(body, types, accept, scope, loops, &then_place)?;
                self.block(body, types, reject, scope, loops, &else_place)?;
            }
            Stmt::Loop {
                body: lb,
                continuing,
            } => {
                self.block(
                    body,
                    types,
                    lb,
                    scope,
                    loops + 1,
                    &Place::Part(here, "loop body"),
                )?;
                if contains_jump(continuing) {
                    return Err(fail(
                        "a loop's continuing block may not break, continue or return".into(),
                    ));
                }
                self.block(
                    body,
                    types,
                    continuing,
                    scope,
                    loops + 1,
                    &Place::Part(here, "continuing"),
                )?;
            }
            Stmt::Break | Stmt::Continue if loops == 0 => {
                return Err(fail(format!("{s:?} outside a loop")))
            }
            Stmt::Break | Stmt::Continue => {}
            Stmt::Return(v) => match (v, self.result) {
                (None, None) => {}
                (Some(h), Some(t)) => {
                    let vt = use_(h, scope)?;
                    if vt != t {
                        return Err(fail(format!("returns {vt}, function returns {t}")));
                    }
                }
                (Some(_), None) => {
                    return Err(fail(
                        "returns a value from a function without a result".into(),
                    ))
                }
                (None, Some(t)) => {
                    return Err(fail(format!(
                        "returns nothing from a function returning {t}"
                    )))
                }
            },
            Stmt::Barrier(_) if !self.is_kernel => {
                return Err(fail(
                    "barriers are allowed in kernels only, not in device functions".into(),
                ))
            }
            Stmt::Barrier(_) => {}
            Stmt::Source(at) if at.file.chars().any(char::is_control) => {
                return Err(fail(format!(
                    "source file name {:?} has control characters",
                    at.file
                )))
            }
            Stmt::Source(_) => {}
            Stmt::Native(call) => self.native_call(body, types, call, scope, loops, here)?,
        }
        Ok(())
    }

    /// A native call: arguments of the intrinsic's parameter types (views of buffers the
    /// kernel may read, and write for a read-write parameter), the result local of its result
    /// type, and a fallback that does not jump out of the call.
    fn native_call(
        &self,
        body: &Body,
        types: &[Type],
        call: &crate::native::NativeCall,
        scope: &mut Scope,
        loops: usize,
        here: &Place,
    ) -> Result<(), Fail> {
        let fail = |m: String| (here.to_string(), m);
        let native = self
            .kernel
            .natives
            .get(call.native.0 as usize)
            .ok_or_else(|| fail(format!("no intrinsic {}", call.native.0)))?;
        let name = &native.name;
        if call.args.len() != native.params.len() {
            return Err(fail(format!(
                "intrinsic `{name}` takes {} arguments, given {}",
                native.params.len(),
                call.args.len()
            )));
        }
        for (arg, p) in call.args.iter().zip(&native.params) {
            let what = format!("argument `{}` of `{name}`", p.name);
            match (arg, &p.kind) {
                (NativeArg::Value(h), ParamKind::Value(t)) => {
                    let vt = visible(types, scope, h).map_err(fail)?;
                    if vt != t {
                        return Err(fail(format!("{what} is {t}, given {vt}")));
                    }
                }
                (NativeArg::Memory(m @ Memory::Buffer(_)), ParamKind::Buffer { elem, access }) => {
                    let write = *access != Access::Read;
                    let e = self
                        .memory_elem(*m, write, write)
                        .map_err(|e| fail(format!("{what}: {e}")))?;
                    if e != *elem {
                        return Err(fail(format!(
                            "{what} is a view of {elem}, given one of {e}"
                        )));
                    }
                }
                (NativeArg::Memory(_), ParamKind::Buffer { .. }) => {
                    return Err(fail(format!(
                        "{what}: native code takes buffers, not shared arrays"
                    )))
                }
                _ => {
                    return Err(fail(format!(
                        "{what}: a value for a view or a view for a value"
                    )))
                }
            }
        }
        match (call.result, &native.result) {
            (None, None) => {}
            (Some(l), Some(t)) if body.locals.get(l.0 as usize).is_some_and(|d| d.ty == *t) => {}
            _ => {
                return Err(fail(format!(
                    "the result local of `{name}` does not match what it returns"
                )))
            }
        }
        if contains_jump(&call.fallback) {
            return Err(fail(format!(
                "the Rust body of intrinsic `{name}` may not break, continue or return out of the \
                 call"
            )));
        }
        self.block(
            body,
            types,
            &call.fallback,
            scope,
            loops,
            &Place::Part(here, "fallback"),
        )
    }
}

struct Scope {
    visible: Vec<bool>,
    evaluated: Vec<bool>,
}

/// The type of `h`, which must be computed where it is used.
fn visible<'t>(types: &'t [Type], scope: &Scope, h: &Handle) -> Result<&'t Type, String> {
    if h.index() >= types.len() {
        return Err(format!("expression %{} does not exist", h.0));
    }
    if !scope.visible[h.index()] {
        return Err(format!("expression %{} is used where it has not been computed (outside the block that computes it, or before it)", h.0));
    }
    Ok(&types[h.index()])
}

/// True when `b` may leave the loop it is in: a `break` or `continue` outside loops nested in
/// it, or a `return` anywhere.
fn contains_jump(b: &Block) -> bool {
    let jump = |s: &Stmt| matches!(s, Stmt::Break | Stmt::Continue | Stmt::Return(_));
    b.0.iter().any(|s| s.any_outside_loops(&jump)) || crate::block_has_return(b)
}

/// The expression handles an expression reads.
pub fn operands(e: &Expr) -> Vec<Handle> {
    match e {
        Expr::Literal(_) | Expr::Param(_) | Expr::LocalGet(_) | Expr::Len(_) | Expr::Builtin(_) => {
            vec![]
        }
        Expr::LocalIndex { index, .. } | Expr::Load { index, .. } => vec![*index],
        Expr::Binary { lhs, rhs, .. } => vec![*lhs, *rhs],
        Expr::Unary { arg, .. } | Expr::Cast { arg, .. } | Expr::Bitcast { arg, .. } => vec![*arg],
        Expr::Select {
            cond,
            accept,
            reject,
        } => vec![*cond, *accept, *reject],
        Expr::Math { args, .. } | Expr::Call { args, .. } => args.clone(),
        Expr::Compose { parts, .. } => parts.clone(),
        Expr::Extract { base, .. } => vec![*base],
        Expr::Atomic {
            index,
            value,
            compare,
            ..
        } => {
            let mut v = vec![*index, *value];
            v.extend(compare);
            v
        }
        Expr::Subgroup { arg, lane, .. } => {
            let mut v = vec![*arg];
            v.extend(lane);
            v
        }
    }
}
