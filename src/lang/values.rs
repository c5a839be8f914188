//! Structs as kernel values: `#[derive(kiln::Value)]`, field access and update.

use super::*;

/// A plain `#[repr(C)]` struct usable as a kernel parameter, local and buffer element;
/// implemented by `#[derive(kiln::Value)]`. In kernel code a value of the struct is a
/// `Val<S>`: `p.x` reads a field, `S { x: .., y: .. }` builds one, `p.x = v` on a `let mut`
/// local or a view element replaces a field.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[derive(Clone, Copy, Debug, PartialEq, kiln::Value)]
/// #[repr(C)]
/// struct Particle {
///     x: f32,
///     v: f32,
/// }
/// #[kiln::kernel]
/// fn step(i: Index1D, ps: ViewMut<Particle>, dt: f32) {
///     let p = ps[i];
///     ps[i] = Particle { x: p.x + p.v * dt, ..p };
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut ps = vec![Particle { x: 0.0, v: 2.0 }, Particle { x: 1.0, v: -1.0 }];
/// ctx.launch(step, ps.len(), (&mut ps, 0.5f32))?;
/// assert_eq!(ps, [Particle { x: 1.0, v: 2.0 }, Particle { x: 0.5, v: -1.0 }]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub trait Value: kiln_ir::IrStruct {
    /// A struct with the same field names holding one `Val` per field (generated code).
    #[doc(hidden)]
    type Parts: Copy;
    /// A struct with the same field names holding each field's [`FieldName`] (generated code).
    #[doc(hidden)]
    type Names;
    /// The fields of `v` (generated code).
    #[doc(hidden)]
    fn parts(v: Val<Self>) -> Self::Parts;
    /// The struct value made of `parts` (generated code).
    #[doc(hidden)]
    fn compose(parts: Self::Parts) -> Val<Self>;
    /// The names of the fields (generated code).
    #[doc(hidden)]
    fn names() -> Self::Names;
}

/// Field `index` of a [`Value`] struct, of type `F` (generated code).
#[doc(hidden)]
pub struct FieldName<F> {
    index: u32,
    _f: PhantomData<fn() -> F>,
}
impl<F> FieldName<F> {
    /// The field at position `index` in declaration order.
    pub const fn new(index: u32) -> FieldName<F> {
        FieldName {
            index,
            _f: PhantomData,
        }
    }
}

/// What picking a field out of a `T`'s [`Fields::Names`] gives: a [`FieldName`] to read from
/// a struct value, or the field itself for the index types (generated code).
#[doc(hidden)]
pub trait Picked<T> {
    /// The field's value.
    type Out;
    /// The field of `from`.
    fn get(self, from: &T) -> Self::Out;
}
impl<S: Value, F: IrType> Picked<Val<S>> for FieldName<F> {
    type Out = Val<F>;
    fn get(self, from: &Val<S>) -> Val<F> {
        from.field::<F>(self.index)
    }
}
impl<T, X> Picked<T> for Val<X> {
    type Out = Val<X>;
    fn get(self, _: &T) -> Val<X> {
        self
    }
}

/// Kernel-side things with named fields: `Val`s of [`Value`] structs and the index types. The
/// macro turns `p.x` into [`field`]`(&p, |n| n.x)`, and field assignments and `..p` in struct
/// literals into uses of [`Fields::fields`] (generated code).
#[doc(hidden)]
pub trait Fields: Sized {
    /// The struct of fields.
    type Parts;
    /// The struct that names each field for [`field`].
    type Names;
    /// The fields.
    fn fields(&self) -> Self::Parts;
    /// The value made of `parts`.
    fn from_fields(parts: Self::Parts) -> Self;
    /// The field names.
    fn names(&self) -> Self::Names;
}
impl<S: Value> Fields for Val<S> {
    type Parts = S::Parts;
    type Names = S::Names;
    fn fields(&self) -> S::Parts {
        S::parts(*self)
    }
    fn from_fields(parts: S::Parts) -> Val<S> {
        S::compose(parts)
    }
    fn names(&self) -> S::Names {
        S::names()
    }
}

/// The one field of `v` that `pick` names, read alone (generated code for `p.x`).
#[doc(hidden)]
pub fn field<T: Fields, P: Picked<T>>(v: &T, pick: impl FnOnce(T::Names) -> P) -> P::Out {
    pick(v.names()).get(v)
}

macro_rules! plain_fields {
    ($($t:ty),*) => {$(
        impl Fields for $t {
            type Parts = $t;
            type Names = $t;
            fn fields(&self) -> $t {
                *self
            }
            fn from_fields(parts: $t) -> $t {
                parts
            }
            fn names(&self) -> $t {
                *self
            }
        }
        impl Record for $t {
            type Parts = $t;
            type Built = $t;
            fn build(parts: $t) -> $t {
                parts
            }
        }
    )*};
}
plain_fields!(Index2D, Index3D);

/// `v` with the fields `set` changes (generated code for `p.x = e`).
#[doc(hidden)]
pub fn with_field<T: Fields>(v: &T, set: impl FnOnce(&mut T::Parts)) -> T {
    let mut parts = v.fields();
    set(&mut parts);
    T::from_fields(parts)
}

/// Types a kernel builds with a struct literal (`S { x: a, y: b }`): the macro fills
/// `Record::Parts` and calls [`Record::build`] (generated code).
#[doc(hidden)]
pub trait Record {
    /// The struct of fields the literal fills.
    type Parts;
    /// What the literal evaluates to.
    type Built;
    /// The value of the literal.
    fn build(parts: Self::Parts) -> Self::Built;
}
impl<S: Value> Record for S {
    type Parts = S::Parts;
    type Built = Val<S>;
    fn build(parts: S::Parts) -> Val<S> {
        S::compose(parts)
    }
}
