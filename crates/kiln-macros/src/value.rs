//! `#[derive(kiln::Value)]`: a plain `#[repr(C)]` struct as a kernel value type.

use crate::error;
use proc_macro2::TokenStream as Tokens;
use quote::quote;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields};

/// Expands the derive: the struct's IR layout (`IrStruct`), a compile-time check that it has
/// no padding, the struct of field handles kernel code builds and the struct of field names
/// it reads single fields through (`Value`).
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
        };
    })
}
