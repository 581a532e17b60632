//! The stubs after a derive error.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::DeriveInput;

use crate::ctxt::Ctxt;

/// After an error, stub impls of what the derive would have generated, so
/// that the user sees the real error and not one follow-up per use of the
/// enum. Nothing here runs: the crate does not compile.
pub(super) fn fallback(node: &DeriveInput) -> TokenStream {
    let syn::Data::Enum(data) = &node.data else {
        return TokenStream::new();
    };
    if !node.generics.params.is_empty() {
        return TokenStream::new();
    }
    let mut cx = Ctxt::default();
    let krate = match crate::attr::machine_attrs(&mut cx, &node.attrs).krate {
        Some(path) => quote!(#path),
        None => quote!(::stateguard),
    };
    let (ident, vis) = (&node.ident, &node.vis);
    // Each constructor once, with the parameters its first declaration
    // gives it (`set(col = bind(T))`, then the guard's `name = bind(T)`),
    // so that calls with arguments meet the signature they will have.
    let mut constructors: Vec<(syn::Ident, Vec<(syn::Ident, syn::Type)>)> = Vec::new();
    for variant in &data.variants {
        for transition in crate::attr::variant(&mut cx, variant).transitions {
            if constructors
                .iter()
                .any(|(name, _)| *name == transition.name)
            {
                continue;
            }
            let set = transition.set.iter().filter_map(|item| match &item.value {
                crate::attr::SetValue::Bind(ty) => Some((item.column.clone(), (**ty).clone())),
                crate::attr::SetValue::Expr(_) => None,
            });
            let guard = transition
                .guard
                .iter()
                .flat_map(|g| g.params.iter().map(|p| (p.name.clone(), (*p.ty).clone())));
            constructors.push((transition.name, set.chain(guard).collect()));
        }
    }
    // A placeholder machine whose transitions the constructors return, as
    // the real ones do, so that a constructor evaluated in a `const` is
    // no second error. It needs a value of the enum: the first unit
    // variant. An enum without one has an error of its own, and its
    // constructors stay bodiless.
    let unit = data
        .variants
        .iter()
        .find(|variant| matches!(variant.fields, syn::Fields::Unit));
    let machine = match unit {
        Some(variant) => {
            let (state, name) = (&variant.ident, ident.to_string());
            let transitions = constructors.iter().map(|(name, _)| {
                let name = name.to_string();
                quote! {
                    #krate::__private::transition(#krate::__private::TransitionParts {
                        name: #name,
                        ..#krate::__private::TransitionParts::of(#ident::#state)
                    })
                }
            });
            let n = constructors.len();
            quote! {{
                static __TRANSITIONS: [#krate::__private::TransitionDef<#ident>; #n] = [
                    #(#transitions),*
                ];
                static __MACHINE: #krate::__private::Machine<#ident> =
                    #krate::__private::placeholder(#name, #ident::#state, &__TRANSITIONS);
                &__MACHINE
            }}
        }
        None => quote!(::core::unimplemented!()),
    };
    let constructors = constructors.iter().enumerate().map(|(i, (name, params))| {
        let transition = match unit {
            Some(_) => quote! {
                <Self as #krate::StateMachine>::MACHINE.transitions()[#i].transition()
            },
            None => quote!(::core::unimplemented!()),
        };
        if params.is_empty() {
            return quote! {
                #vis const fn #name() -> #krate::Transition<Self> {
                    #transition
                }
            };
        }
        // A name declared twice is an error reported already; the
        // parameters stay apart.
        let names: Vec<_> = params
            .iter()
            .enumerate()
            .map(
                |(i, (name, _))| match params[..i].iter().any(|(earlier, _)| earlier == name) {
                    true => format_ident!("{}_{}", name, i),
                    false => name.clone(),
                },
            )
            .collect();
        let types = params.iter().map(|(_, ty)| ty);
        let types2 = params.iter().map(|(_, ty)| ty);
        let body = match unit {
            Some(_) => quote!(#krate::__private::bound(#transition, (#(#names,)*))),
            None => quote!(::core::unimplemented!()),
        };
        quote! {
            #[allow(unused_variables)]
            #vis fn #name(#(#names: #types),*) -> #krate::Bound<Self, (#(#types2,)*)> {
                #body
            }
        }
    });
    quote! {
        #[automatically_derived]
        impl #krate::StateMachine for #ident {
            type KeyShape = #krate::key::shape::One;

            const MACHINE: &'static #krate::__private::Machine<Self> = #machine;

            fn as_str(self) -> &'static str {
                ::core::unimplemented!()
            }

            fn from_db_str(_: &str) -> ::core::option::Option<Self> {
                ::core::unimplemented!()
            }
        }

        #[automatically_derived]
        impl<__K> #krate::__private::KeyType<__K> for #ident {}

        #[automatically_derived]
        impl<__DB: #krate::Backend> #krate::__private::FollowUpValues<__DB> for #ident {
            fn follow_up_values(_: usize) -> #krate::__private::Binder<__DB> {
                ::core::unimplemented!()
            }
        }

        #[automatically_derived]
        impl<__DB: #krate::Backend> #krate::__private::ColumnTypes<__DB> for #ident {
            const COLUMN_TYPES: &'static [#krate::__private::SqlTypeFn] = &[];
        }

        #[automatically_derived]
        impl #krate::__private::PlainDone for #ident {}

        #[automatically_derived]
        impl #krate::__private::PlainFailed for #ident {}

        impl #ident {
            #(#constructors)*
        }
    }
}
