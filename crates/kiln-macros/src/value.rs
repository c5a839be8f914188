//! `#[derive(kiln::Value)]`: a plain `#[repr(C)]` struct as a kernel value type.

use crate::error;
use proc_macro2::TokenStream as Tokens;
use quote::quote;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields};

/// Expands the derive: the struct's IR layout (`IrStruct`), a compile-time check that it has
/// no padding, the struct of field handles kernel code builds and the struct of field names
/// it reads single fields through (`Value`), and the struct as a query row (`Row`: its
/// columns are its scalar leaves, closures receive and may return the struct of its fields'
/// row values, `RowVals`).
pub fn expand_value(input: DeriveInput) -> syn::Result<Tokens> {
    let name = &input.ident;
    if let Some(p) = input.generics.params.first() {
        return Err(error(
            p.span(),
            "kiln values cannot be generic; declare one struct per field type",
        ));
    }
    let repr_c = input.attrs.iter().any(|a| {
        a.path().is_ident("repr")
            && a.parse_nested_meta(|m| {
                if m.path.is_ident("C") {
                    Err(m.error("found"))
                } else {
                    Ok(())
                }
            })
            .is_err()
    });
    if !repr_c {
        return Err(error(
            name.span(),
            "add #[repr(C)] to this struct: kiln reads and writes its fields at their C layout \
             offsets on every backend",
        ));
    }
    let Data::Struct(data) = &input.data else {
        return Err(error(
            name.span(),
            "#[derive(kiln::Value)] is for structs with named fields; enums and unions have no \
             kernel representation",
        ));
    };
    let Fields::Named(fields) = &data.fields else {
        return Err(error(
            data.fields.span(),
            "#[derive(kiln::Value)] needs named fields (`struct P { x: f32 }`); kernels read \
             them as `p.x`",
        ));
    };
    if fields.named.is_empty() {
        return Err(error(name.span(), "a kiln value needs at least one field"));
    }
    let vis = &input.vis;
    let name_str = name.to_string();
    let idents: Vec<_> = fields
        .named
        .iter()
        .filter_map(|f| f.ident.clone())
        .collect();
    let types: Vec<_> = fields.named.iter().map(|f| f.ty.clone()).collect();
    let names: Vec<String> = idents.iter().map(|i| i.to_string()).collect();
    let indices: Vec<u32> = (0..idents.len() as u32).collect();
    let padding = format!(
        "`{name_str}` has padding bytes between or after its fields; order the fields from \
         the largest to the smallest type (or add explicit padding fields) so that its layout \
         is the same on every backend"
    );
    Ok(quote! {
        const _: () = {
            // SAFETY: the struct is #[repr(C)], the field types below are its own in declaration
            // order, and the assertion below rules out padding.
            unsafe impl ::kiln::ir::IrStruct for #name {
                fn struct_type() -> ::kiln::ir::StructType {
                    ::kiln::ir::StructType {
                        name: #name_str.to_string(),
                        fields: ::std::vec![#(::kiln::ir::Field {
                            name: #names.to_string(),
                            ty: <#types as ::kiln::ir::IrType>::ir_type(),
                        }),*],
                    }
                }
            }
            assert!(
                ::core::mem::size_of::<#name>() == 0 #(+ ::core::mem::size_of::<#types>())*,
                #padding
            );

            /// The fields of a kernel value of this type, one IR value each.
            #[allow(dead_code, private_interfaces)]
            #[derive(Clone, Copy)]
            #vis struct Parts {
                #(#vis #idents: ::kiln::ir::Val<#types>,)*
            }

            /// The fields of this type by name, for reading one alone.
            #[allow(dead_code, private_interfaces)]
            #vis struct Names {
                #(#vis #idents: ::kiln::lang::FieldName<#types>,)*
            }

            impl ::kiln::lang::Value for #name {
                type Parts = Parts;
                type Names = Names;
                fn names() -> Names {
                    Names { #(#idents: ::kiln::lang::FieldName::new(#indices),)* }
                }
                fn parts(v: ::kiln::ir::Val<Self>) -> Parts {
                    Parts { #(#idents: v.field::<#types>(#indices),)* }
                }
                fn compose(p: Parts) -> ::kiln::ir::Val<Self> {
                    ::kiln::ir::compose::<Self>(&[#(p.#idents.erase()),*])
                }
            }

            /// The scalar leaves of this type: its query columns.
            fn leaves() -> &'static ::kiln::struct_row::Leaves<#name> {
                static LEAVES: ::std::sync::OnceLock<::kiln::struct_row::Leaves<#name>> =
                    ::std::sync::OnceLock::new();
                LEAVES.get_or_init(::kiln::struct_row::Leaves::of)
            }

            /// The fields of a query row of this type, as closures receive them.
            #[allow(dead_code, private_interfaces)]
            #[derive(Clone, Copy)]
            #vis struct RowVals {
                #(#vis #idents: <#types as ::kiln::struct_row::RowField>::Vals,)*
            }

            impl ::kiln::struct_row::RowField for #name {
                type Vals = RowVals;
                fn from_columns(
                    cols: &mut dyn ::core::iter::Iterator<Item = ::kiln::ir::AnyVal>,
                ) -> RowVals {
                    <#name as ::kiln::Row>::vals(cols)
                }
                fn to_columns(v: RowVals, out: &mut ::std::vec::Vec<::kiln::ir::AnyVal>) {
                    <#name as ::kiln::Row>::handles(v, out);
                }
            }

            impl ::kiln::Row for #name {
                type Vals = RowVals;
                fn width() -> usize {
                    leaves().types().len()
                }
                fn column_types(out: &mut ::std::vec::Vec<::kiln::ir::ScalarType>) {
                    out.extend_from_slice(leaves().types());
                }
                fn vals(
                    cols: &mut dyn ::core::iter::Iterator<Item = ::kiln::ir::AnyVal>,
                ) -> RowVals {
                    RowVals {
                        #(#idents: <#types as ::kiln::struct_row::RowField>::from_columns(cols),)*
                    }
                }
                fn handles(v: RowVals, out: &mut ::std::vec::Vec<::kiln::ir::AnyVal>) {
                    #(<#types as ::kiln::struct_row::RowField>::to_columns(v.#idents, out);)*
                }
                fn to_values(self, out: &mut ::std::vec::Vec<::kiln::ir::ScalarValue>) {
                    leaves().values(&self, out);
                }
                fn from_values(
                    vals: &mut dyn ::core::iter::Iterator<Item = ::kiln::ir::ScalarValue>,
                ) -> Self {
                    leaves().from_values(vals)
                }
                fn read(cols: &[&[u8]], i: usize) -> Self {
                    leaves().read(cols, i)
                }
                fn write(&self, cols: &mut [&mut [u8]], i: usize) {
                    leaves().write(self, cols, i);
                }
                fn write_columns(xs: &[Self], cols: &mut [&mut [u8]]) {
                    leaves().write_columns(xs, cols);
                }
            }

            impl ::kiln::IntoRow for RowVals {
                type Row = #name;
                fn into_handles(self, out: &mut ::std::vec::Vec<::kiln::ir::AnyVal>) {
                    <#name as ::kiln::Row>::handles(self, out);
                }
            }
        };
    })
}
