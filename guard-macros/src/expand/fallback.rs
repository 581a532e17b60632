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
    let constructors = constructors.iter().map(|(name, params)| {
        if params.is_empty() {
            return quote! {
                #vis const fn #name() -> #krate::Transition<Self> {
                    ::core::unimplemented!()
                }
            };
        }
        // A name declared twice is an error reported already; the
        // parameters stay apart.
        let names = params.iter().enumerate().map(|(i, (name, _))| {
            match params[..i].iter().any(|(earlier, _)| earlier == name) {
                true => format_ident!("{}_{}", name, i),
                false => name.clone(),
            }
        });
        let types = params.iter().map(|(_, ty)| ty);
        let types2 = params.iter().map(|(_, ty)| ty);
        quote! {
            #[allow(unused_variables)]
            #vis fn #name(#(#names: #types),*) -> #krate::Bound<Self, (#(#types2,)*)> {
                ::core::unimplemented!()
            }
        }
    });
    quote! {
        #[automatically_derived]
        impl #krate::StateMachine for #ident {
            type KeyShape = #krate::key::shape::One;

            const MACHINE: &'static #krate::__private::Machine<Self> = ::core::unimplemented!();

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
