//! The IR: kernels and device functions made of expressions in an arena and structured
//! statements. Semantics are stated in the crate documentation.

use crate::types::{ScalarType, ScalarValue, Type};

/// Index of an expression in its function's arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Handle(pub u32);

impl Handle {
    /// The arena index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Index of a local variable in its function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LocalId(pub u32);

/// Index of a device function in [`Kernel::functions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FunctionId(pub u32);

/// A grid axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Axis {
    /// x, the fastest-varying axis.
    X,
    /// y
    Y,
    /// z
    Z,
}

impl Axis {
    /// 0, 1 or 2.
    pub fn index(self) -> usize {
        self as usize
    }

    /// `"x"`, `"y"` or `"z"`.
    pub fn name(self) -> &'static str {
        ["x", "y", "z"][self as usize]
    }
}

/// A read-only value the launch provides; every builtin is `u32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// Work item index in the whole grid along an axis (`group_id * group_size + local_id`).
    GlobalId(Axis),
    /// Work item index inside its group along an axis.
    LocalId(Axis),
    /// Index of the group along an axis.
    GroupId(Axis),
    /// Work items per group along an axis.
    GroupSize(Axis),
    /// Groups in the grid along an axis.
    NumGroups(Axis),
    /// Work items in the grid along an axis (`num_groups * group_size`).
    GlobalSize(Axis),
    /// Flattened index of the work item inside its group (`x + y*sx + z*sx*sy`).
    LocalIndex,
    /// Lanes per subgroup on this device (1 on the CPU backend).
    SubgroupSize,
    /// Index of the work item's subgroup inside its group.
    SubgroupId,
    /// Lane of the work item inside its subgroup.
    SubgroupLane,
}

/// Binary operators. Arithmetic and bit operators need both sides of one type; comparisons
/// return `bool` (or a vector of `bool`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `+`, wrapping on integers.
    Add,
    /// `-`, wrapping on integers.
    Sub,
    /// `*`, wrapping on integers.
    Mul,
    /// `/`; integer division by zero and `MIN / -1` follow the crate rules.
    Div,
    /// `%` with the sign of the dividend (C `fmod` for floats); rules for zero in the crate docs.
    Rem,
    /// Bitwise and (logical and on `bool`).
    And,
    /// Bitwise or (logical or on `bool`).
    Or,
    /// Bitwise xor (logical xor on `bool`).
    Xor,
    /// `<<`; the shift amount is taken modulo the bit width.
    Shl,
    /// `>>`, arithmetic on signed types; the shift amount is taken modulo the bit width.
    Shr,
    /// `==` (false when either float side is NaN).
    Eq,
    /// `!=` (true when either float side is NaN).
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl BinaryOp {
    /// True for the six comparisons.
    pub fn is_compare(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }

    /// The operator as written in Rust.
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
            BinaryOp::And => "&",
            BinaryOp::Or => "|",
            BinaryOp::Xor => "^",
            BinaryOp::Shl => "<<",
            BinaryOp::Shr => ">>",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
        }
    }
}

/// Unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// Negation (wrapping on integers).
    Neg,
    /// Bitwise not on integers, logical not on `bool`.
    Not,
}

/// Math functions. Float-only unless noted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MathFn {
    /// sine
    Sin,
    /// cosine
    Cos,
    /// tangent
    Tan,
    /// arcsine
    Asin,
    /// arccosine
    Acos,
    /// arctangent
    Atan,
    /// `atan2(y, x)`
    Atan2,
    /// hyperbolic sine
    Sinh,
    /// hyperbolic cosine
    Cosh,
    /// hyperbolic tangent
    Tanh,
    /// e^x
    Exp,
    /// 2^x
    Exp2,
    /// natural logarithm
    Log,
    /// base-2 logarithm
    Log2,
    /// base-10 logarithm
    Log10,
    /// `pow(x, y)`
    Pow,
    /// square root
    Sqrt,
    /// `1 / sqrt(x)`
    Rsqrt,
    /// absolute value (integers too; `abs(MIN) = MIN`)
    Abs,
    /// round toward -inf
    Floor,
    /// round toward +inf
    Ceil,
    /// round half away from zero
    Round,
    /// round toward zero
    Trunc,
    /// `x - trunc(x)` (Rust's `fract`)
    Fract,
    /// minimum (integers too); NaN rule in the crate docs
    Min,
    /// maximum (integers too); NaN rule in the crate docs
    Max,
    /// `clamp(x, lo, hi) = min(max(x, lo), hi)` (integers too)
    Clamp,
    /// `fma(a, b, c) = a * b + c` with one rounding
    Fma,
    /// -1, 0 or 1 (integers too); zeros and NaN are returned unchanged
    Sign,
    /// `copysign(magnitude, sign)`; `|magnitude|` when `sign` is NaN
    Copysign,
    /// NaN test, returns `bool`
    IsNan,
    /// infinity test (either sign), returns `bool`
    IsInf,
}

impl MathFn {
    /// Number of arguments.
    pub fn arity(self) -> usize {
        match self {
            MathFn::Atan2 | MathFn::Pow | MathFn::Min | MathFn::Max | MathFn::Copysign => 2,
            MathFn::Clamp | MathFn::Fma => 3,
            _ => 1,
        }
    }

    /// True for functions that also accept integer arguments.
    pub fn allows_int(self) -> bool {
        matches!(
            self,
            MathFn::Abs | MathFn::Min | MathFn::Max | MathFn::Clamp | MathFn::Sign
        )
    }

    /// True for the predicates that return `bool`.
    pub fn returns_bool(self) -> bool {
        matches!(self, MathFn::IsNan | MathFn::IsInf)
    }

    /// Lower-case name as printed.
    pub fn name(self) -> &'static str {
        match self {
            MathFn::Sin => "sin",
            MathFn::Cos => "cos",
            MathFn::Tan => "tan",
            MathFn::Asin => "asin",
            MathFn::Acos => "acos",
            MathFn::Atan => "atan",
            MathFn::Atan2 => "atan2",
            MathFn::Sinh => "sinh",
            MathFn::Cosh => "cosh",
            MathFn::Tanh => "tanh",
            MathFn::Exp => "exp",
            MathFn::Exp2 => "exp2",
            MathFn::Log => "log",
            MathFn::Log2 => "log2",
            MathFn::Log10 => "log10",
            MathFn::Pow => "pow",
            MathFn::Sqrt => "sqrt",
            MathFn::Rsqrt => "rsqrt",
            MathFn::Abs => "abs",
            MathFn::Floor => "floor",
            MathFn::Ceil => "ceil",
            MathFn::Round => "round",
            MathFn::Trunc => "trunc",
            MathFn::Fract => "fract",
            MathFn::Min => "min",
            MathFn::Max => "max",
            MathFn::Clamp => "clamp",
            MathFn::Fma => "fma",
            MathFn::Sign => "sign",
            MathFn::Copysign => "copysign",
            MathFn::IsNan => "is_nan",
            MathFn::IsInf => "is_inf",
        }
    }
}

/// Atomic read-modify-write operations; each returns the value held before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// wrapping add (also `f32`)
    Add,
    /// wrapping subtract
    Sub,
    /// minimum
    Min,
    /// maximum
    Max,
    /// bitwise and
    And,
    /// bitwise or
    Or,
    /// bitwise xor
    Xor,
    /// store the new value
    Exchange,
    /// store `value` if the current value equals `compare`
    CompareExchange,
}

/// Where an atomic or a memory access goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Memory {
    /// The kernel's buffer parameter with this index.
    Buffer(u32),
    /// The kernel's shared array with this index.
    Shared(u32),
}

/// Subgroup (warp) operations over the subgroup's active lanes (see the crate docs). A source
/// lane outside the subgroup, or not active, yields the caller's own value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubgroupOp {
    /// value of the lane given by `lane`
    Shuffle,
    /// value of lane `self - lane`
    ShuffleUp,
    /// value of lane `self + lane`
    ShuffleDown,
    /// value of lane `self ^ lane`
    ShuffleXor,
    /// value of lane `lane`, which must be the same for the whole subgroup
    Broadcast,
    /// `u32` mask of the lanes (0..32) whose `bool` argument is true
    Ballot,
    /// true if the argument is true on every active lane
    All,
    /// true if the argument is true on some active lane
    Any,
    /// sum over the subgroup
    ReduceAdd,
    /// minimum over the subgroup
    ReduceMin,
    /// maximum over the subgroup
    ReduceMax,
    /// sum over lanes `0..=self`
    InclusiveAdd,
    /// sum over lanes `0..self`
    ExclusiveAdd,
}

impl SubgroupOp {
    /// True for the operations that take a lane (or delta/mask) operand.
    pub fn takes_lane(self) -> bool {
        matches!(
            self,
            SubgroupOp::Shuffle
                | SubgroupOp::ShuffleUp
                | SubgroupOp::ShuffleDown
                | SubgroupOp::ShuffleXor
                | SubgroupOp::Broadcast
        )
    }
}

/// An expression. Each is computed where a [`Stmt::Eval`] names it and keeps that value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Expr {
    /// A constant.
    Literal(ScalarValue),
    /// A value parameter of the current function (kernel scalar/struct parameter or device
    /// function argument).
    Param(u32),
    /// The current value of a local (not an array local).
    LocalGet(LocalId),
    /// Element `index` of an array local; out of bounds reads zero.
    LocalIndex {
        /// array local
        local: LocalId,
        /// `u32` index
        index: Handle,
    },
    /// Element `index` of a buffer or shared array; out of bounds reads zero.
    Load {
        /// buffer or shared array
        memory: Memory,
        /// `u32` index
        index: Handle,
    },
    /// Number of elements of a buffer parameter (`u32`), or of a shared array.
    Len(Memory),
    /// A binary operation.
    Binary {
        /// operator
        op: BinaryOp,
        /// left operand
        lhs: Handle,
        /// right operand
        rhs: Handle,
    },
    /// A unary operation.
    Unary {
        /// operator
        op: UnaryOp,
        /// operand
        arg: Handle,
    },
    /// `if cond { accept } else { reject }` on values; both sides are computed.
    Select {
        /// `bool` condition
        cond: Handle,
        /// value when true
        accept: Handle,
        /// value when false
        reject: Handle,
    },
    /// Numeric conversion (per component on vectors) with the crate's cast rules.
    Cast {
        /// value
        arg: Handle,
        /// target component type
        to: ScalarType,
    },
    /// Reinterpret the bits as another type of the same size.
    Bitcast {
        /// value
        arg: Handle,
        /// target component type
        to: ScalarType,
    },
    /// A math function (per component on vectors).
    Math {
        /// function
        fun: MathFn,
        /// arguments, `fun.arity()` of them
        args: Vec<Handle>,
    },
    /// A launch builtin.
    Builtin(Builtin),
    /// Build a vector or struct from its components or fields.
    Compose {
        /// vector or struct type
        ty: Type,
        /// one value per component or field
        parts: Vec<Handle>,
    },
    /// Component of a vector or field of a struct.
    Extract {
        /// vector or struct value
        base: Handle,
        /// component or field index
        index: u32,
    },
    /// Atomic read-modify-write on an element; returns the old value. Out of bounds does
    /// nothing and returns zero.
    Atomic {
        /// buffer (read-write) or shared array
        memory: Memory,
        /// `u32` index
        index: Handle,
        /// operation
        op: AtomicOp,
        /// operand
        value: Handle,
        /// expected value for `CompareExchange`
        compare: Option<Handle>,
    },
    /// A subgroup operation.
    Subgroup {
        /// operation
        op: SubgroupOp,
        /// operand
        arg: Handle,
        /// `u32` lane, delta or mask for the shuffles
        lane: Option<Handle>,
    },
    /// Call of a device function; its value is the function's return value.
    Call {
        /// callee
        function: FunctionId,
        /// argument values
        args: Vec<Handle>,
    },
}

/// A list of statements.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Block(pub Vec<Stmt>);

/// A statement.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Stmt {
    /// Compute an expression here; later statements dominated by this one may use it.
    Eval(Handle),
    /// Assign a local (not an array local).
    LocalSet {
        /// target
        local: LocalId,
        /// new value
        value: Handle,
    },
    /// Assign an element of an array local; out of bounds is skipped.
    LocalIndexSet {
        /// array local
        local: LocalId,
        /// `u32` index
        index: Handle,
        /// new value
        value: Handle,
    },
    /// Write an element of a buffer or shared array; out of bounds is skipped.
    Store {
        /// buffer (writable) or shared array
        memory: Memory,
        /// `u32` index
        index: Handle,
        /// value of the element type
        value: Handle,
    },
    /// Two-way branch.
    If {
        /// `bool` condition
        cond: Handle,
        /// taken when true
        accept: Block,
        /// taken when false
        reject: Block,
    },
    /// Loop until `Break`. `Continue` jumps to `continuing`, which runs before each next
    /// iteration (a `for` loop's increment lives there).
    Loop {
        /// loop body
        body: Block,
        /// runs after the body and after every `Continue`
        continuing: Block,
    },
    /// Leave the innermost loop.
    Break,
    /// Go to the innermost loop's `continuing` block.
    Continue,
    /// Leave the function, with a value for device functions that return one.
    Return(Option<Handle>),
    /// Where the statements that follow come from in the user's source; generated source
    /// keeps it as a comment. Does nothing.
    Source(SourceLine),
    /// Wait until every work item of the group (or subgroup) reaches this point; makes
    /// shared-memory writes before it visible after it. Must be reached by all work items of
    /// the group or by none.
    Barrier(BarrierScope),
    /// A call of an intrinsic: the target's function where it binds one, else the Rust body.
    Native(crate::native::NativeCall),
}

/// A line of the Rust source a kernel was written in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SourceLine {
    /// The file, as `file!()` gives it; no control characters.
    pub file: String,
    /// 1-based line.
    pub line: u32,
}

impl std::fmt::Display for SourceLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// What a barrier waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BarrierScope {
    /// every work item of the group
    Group,
    /// every lane of the subgroup
    Subgroup,
}

/// A local variable; zero at function entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LocalDecl {
    /// Name used in printed and generated source.
    pub name: String,
    /// Type.
    pub ty: Type,
}

/// How a kernel may use a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// loads only
    Read,
    /// stores only
    Write,
    /// loads, stores and atomics
    ReadWrite,
}

/// What a parameter is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A global buffer of elements.
    Buffer {
        /// element type (scalar, vector or struct)
        elem: Type,
        /// permitted use
        access: Access,
    },
    /// A value passed by copy (scalar, vector or struct).
    Value(Type),
}

/// A kernel or device function parameter.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Param {
    /// Name, a Rust identifier.
    pub name: String,
    /// Buffer or value.
    pub kind: ParamKind,
}

/// How many elements a shared array has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SharedLen {
    /// Fixed when the kernel is built.
    Static(u32),
    /// Given at launch.
    Dynamic,
}

/// A shared (workgroup) array: one per group, visible to all its work items. Its contents
/// when a group starts are unspecified on the GPU backends (as in CUDA and OpenCL; the CPU
/// backend zeroes it): a kernel writes an element before any work item reads it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SharedDecl {
    /// Name, a Rust identifier.
    pub name: String,
    /// Element type.
    pub elem: Type,
    /// Element count.
    pub len: SharedLen,
}

/// A function body: expression arena, locals and statements.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Body {
    /// Expression arena; `Handle(i)` names `exprs[i]`.
    pub exprs: Vec<Expr>,
    /// Local variables.
    pub locals: Vec<LocalDecl>,
    /// Statements.
    pub block: Block,
}

/// A device function callable from a kernel (or another device function declared before it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Function {
    /// Name, a Rust identifier.
    pub name: String,
    /// Value parameters.
    pub params: Vec<Param>,
    /// Return type, if any.
    pub result: Option<Type>,
    /// Body.
    pub body: Body,
    /// Keep as a real function in generated source instead of inlining it.
    pub noinline: bool,
}

/// A kernel: the entry point of a launch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    /// Name, a Rust identifier.
    pub name: String,
    /// Buffer and value parameters, in launch-argument order.
    pub params: Vec<Param>,
    /// Shared arrays.
    pub shared: Vec<SharedDecl>,
    /// Device functions the body calls; a function may call only functions before it.
    pub functions: Vec<Function>,
    /// The intrinsics the body and the device functions call ([`Stmt::Native`]).
    pub natives: Vec<crate::native::Native>,
    /// The kernel body.
    pub body: Body,
    /// The literals of the body that user code emitted (inside
    /// [`user_code`](crate::constants::user_code)), each with its slot, in the order they
    /// were emitted: what [`record_constants`](crate::constants::record_constants) and
    /// [`hoist_constants`](crate::constants::hoist_constants) turn into parameters. Writers
    /// ignore it; equality and the structural hash include it (the same build gives the same
    /// record).
    pub user_literals: Vec<(Handle, crate::constants::ConstantSlot)>,
    /// How backends compile the kernel (nothing set by the builder); part of equality and the
    /// structural hash, so a kernel compiled with other options is another cache entry.
    pub options: crate::CompileOptions,
}

impl Kernel {
    /// True if the body or a device function contains a group barrier.
    pub fn has_group_barrier(&self) -> bool {
        block_has_barrier(&self.body.block)
    }
}

/// True if the block contains a `Barrier(Group)` at any depth.
pub fn block_has_barrier(b: &Block) -> bool {
    b.0.iter().any(stmt_has_barrier)
}

/// True if the block contains a loop at any depth.
pub fn block_has_loop(b: &Block) -> bool {
    b.any(&|s| matches!(s, Stmt::Loop { .. }))
}

/// True if the block contains a `return` at any depth.
pub fn block_has_return(b: &Block) -> bool {
    b.0.iter().any(stmt_has_return)
}

/// True if the statement is or contains a `return`.
pub fn stmt_has_return(s: &Stmt) -> bool {
    s.any(&|s| matches!(s, Stmt::Return(_)))
}

/// True if the statement is or contains a `Barrier(Group)`.
pub fn stmt_has_barrier(s: &Stmt) -> bool {
    s.any(&|s| matches!(s, Stmt::Barrier(BarrierScope::Group)))
}
