//! The items beside the `StateMachine` impl: the transition constructors,
//! the traits the runtime bounds its calls by (`FollowUpValues`,
//! `ColumnTypes`, `PlainDone`, `PlainFailed`, `KeyType`, `HasHistory`,
//! `HasVersion`), and the `text!` conversions.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::Gen;
use super::docs::{constructor_doc, diagram_doc};

impl Gen<'_> {
    /// The transition constructors, one per transition, in an inherent
    /// impl of the enum.
    pub(super) fn constructors(&self) -> TokenStream {
        let (model, krate, private, ident) =
            (self.model, &self.krate, &self.private, self.model.ident);
        let vis = &self.input.original.vis;
        let diagram = diagram_doc(model);
        let constructors = model.transitions.iter().enumerate().map(|(i, t)| {
            let fn_name = t.name;
            let doc = constructor_doc(model, i);
            // set(bank_ref = bind(String)): one parameter per bound column, in
            // declaration order, bound in that order.
            let params: Vec<_> = t
                .params()
                .map(|(col, ty)| (format_ident!("{}", col), ty))
                .collect();
            if params.is_empty() {
                return quote! {
                    #[doc = #doc]
                    #[inline]
                    #[must_use]
                    #vis const fn #fn_name() -> #krate::Transition<Self> {
                        <Self as #krate::StateMachine>::MACHINE.transitions()[#i].transition()
                    }
                };
            }
            let names = params.iter().map(|(name, _)| name);
            let names2 = params.iter().map(|(name, _)| name);
            let types = params.iter().map(|(_, ty)| ty);
            let types2 = params.iter().map(|(_, ty)| ty);
            quote! {
                #[doc = #doc]
                #[inline]
                #[must_use]
                #vis fn #fn_name(#(#names: #types),*) -> #krate::Bound<Self, (#(#types2,)*)> {
                    #private::bound(
                        <Self as #krate::StateMachine>::MACHINE.transitions()[#i].transition(),
                        (#(#names2,)*),
                    )
                }
            }
        });
        quote! {
            // No `#[automatically_derived]`: rustc accepts it only on trait
            // impls and is phasing it out elsewhere. A transition may share the
            // enum's name (`Hold::hold()`), which clippy would flag in the
            // user's crate.
            #[doc = #diagram]
            #[allow(clippy::self_named_constructors)]
            impl #ident {
                #(#constructors)*
            }
        }
    }

    /// The `FollowUpValues` impl: how the verdict's values are bound.
    pub(super) fn follow_up_values(&self) -> TokenStream {
        let (model, krate, private, ident) =
            (self.model, &self.krate, &self.private, self.model.ident);
        // The follow-ups of in-flight states that bind values take them from
        // the verdict: one binder per such transition, for every backend that
        // can bind its types.
        let mut follow_ups: Vec<usize> = model
            .states
            .iter()
            .filter_map(|s| s.in_flight.as_ref())
            .flat_map(|f| [Some(f.done), f.failed])
            .flatten()
            .filter(|&i| model.transitions[i].binds() > 0)
            .collect();
        follow_ups.sort_unstable();
        follow_ups.dedup();
        // Each by its position among the machine's transitions.
        let follow_up_indexes = follow_ups.iter();
        let follow_up_types: Vec<_> = follow_ups
            .iter()
            .map(|&i| {
                let types = model.transitions[i].params().map(|(_, ty)| ty);
                quote!((#(#types,)*))
            })
            .collect();
        let follow_up_types2 = follow_up_types.iter();
        // A machine without such follow-ups keeps the trait's default: none
        // binds values.
        let binders = (!follow_ups.is_empty()).then(|| {
            quote! {
                fn follow_up_values(transition: usize) -> #private::Binder<__DB> {
                    match transition {
                        #(#follow_up_indexes => #private::binder::<__DB, #follow_up_types2>(),)*
                        _ => #private::binder::<__DB, ()>(),
                    }
                }
            }
        });
        quote! {
            #[automatically_derived]
            impl<__DB: #krate::Backend> #private::FollowUpValues<__DB> for #ident
            where
                #(__DB: #private::Binds<#follow_up_types>,)*
            {
                #binders
            }
        }
    }

    /// The `ColumnTypes` impl: the SQL types of the columns' Rust types.
    pub(super) fn column_types(&self) -> TokenStream {
        let (model, krate, private, ident) =
            (self.model, &self.krate, &self.private, self.model.ident);
        // The SQL type sqlx gives each Rust type the machine declares for a
        // column (`key_type`, `bind(Type)`), for `ddl::table`: on every
        // backend that has one for each of them.
        let rust_types: Vec<syn::Type> = (crate::ddl::table::rust_types(model).into_iter())
            .map(lifetimes_named)
            .collect();
        quote! {
            #[automatically_derived]
            impl<__DB: #krate::Backend> #private::ColumnTypes<__DB> for #ident
            where
                #(#rust_types: #private::sqlx::Type<__DB>,)*
            {
                const COLUMN_TYPES: &'static [#private::SqlTypeFn] =
                    &[#(#private::sql_type::<__DB, #rust_types>),*];
            }
        }
    }

    /// The `PlainDone` and `PlainFailed` impls, where they hold.
    pub(super) fn plain_verdicts(&self) -> TokenStream {
        let (model, private, ident) = (self.model, &self.private, self.model.ident);
        // `Verdict::done()` and `Verdict::failed()` end a row without values:
        // only for a machine where every in-flight state's follow-up of that
        // kind binds none, so that a verdict without the values
        // its follow-up writes is a compile error, not a failure after the
        // effect ran.
        let in_flight: Vec<_> = model
            .states
            .iter()
            .filter_map(|s| s.in_flight.as_ref())
            .collect();
        let plain =
            |follow_up: Option<usize>| follow_up.is_some_and(|i| model.transitions[i].binds() == 0);
        // A machine without in-flight states has no follow-up to end: neither.
        let any = !in_flight.is_empty();
        let plain_done = (any && in_flight.iter().all(|f| plain(Some(f.done)))).then(|| {
            quote! {
                #[automatically_derived]
                impl #private::PlainDone for #ident {}
            }
        });
        let plain_failed = (any && in_flight.iter().all(|f| plain(f.failed))).then(|| {
            quote! {
                #[automatically_derived]
                impl #private::PlainFailed for #ident {}
            }
        });
        quote!(#plain_done #plain_failed)
    }

    /// The `KeyType` impl.
    pub(super) fn key_type(&self) -> TokenStream {
        let (private, ident) = (&self.private, self.model.ident);
        // The key type `claim` and `recover` read rows' keys back as: the
        // declared one alone, so that they infer it, or any.
        match &self.input.attrs.key_type {
            Some(ty) => quote! {
                #[automatically_derived]
                impl #private::KeyType<#ty> for #ident {}
            },
            None => quote! {
                #[automatically_derived]
                impl<__K> #private::KeyType<__K> for #ident {}
            },
        }
    }

    /// The `HasHistory` impl, for a machine with a history table.
    pub(super) fn has_history(&self) -> Option<TokenStream> {
        let (krate, ident) = (&self.krate, self.model.ident);
        // Only a machine with a history table takes notes: `noted` asks for it.
        self.model.history.as_ref().map(|_| {
            quote! {
                #[automatically_derived]
                impl #krate::HasHistory for #ident {}
            }
        })
    }

    /// The `HasVersion` impl, for a machine with a version column.
    pub(super) fn has_version(&self) -> Option<TokenStream> {
        let (krate, ident) = (&self.krate, self.model.ident);
        // Only a machine with a version column has an occurrence to expect:
        // `expecting` asks for it.
        self.model.version.as_ref().map(|_| {
            quote! {
                #[automatically_derived]
                impl #krate::HasVersion for #ident {}
            }
        })
    }

    /// The `text!` conversions.
    pub(super) fn text(&self) -> TokenStream {
        let (private, ident) = (&self.private, self.model.ident);
        // `Display`, `FromStr` and the sqlx (and serde) impls over the database
        // strings, unless the enum has its own (`conversions = false`).
        match self.input.attrs.conversions {
            Some(false) => TokenStream::new(),
            _ => quote!(#private::text!(#ident);),
        }
    }
}

/// `ty` with each elided lifetime, and each `'_`, named `'static`: a type
/// in a `where` clause names its lifetimes, and `bind(&str)` names none.
fn lifetimes_named(ty: &syn::Type) -> syn::Type {
    fn name(ty: &mut syn::Type) {
        let named = |lifetime: &mut syn::Lifetime| {
            if lifetime.ident == "_" {
                *lifetime = syn::Lifetime::new("'static", lifetime.span());
            }
        };
        match ty {
            syn::Type::Reference(reference) => {
                match &mut reference.lifetime {
                    Some(lifetime) => named(lifetime),
                    None => {
                        let span = reference.and_token.span;
                        reference.lifetime = Some(syn::Lifetime::new("'static", span));
                    }
                }
                name(&mut reference.elem);
            }
            syn::Type::Path(path) => {
                if let Some(qself) = &mut path.qself {
                    name(&mut qself.ty);
                }
                for segment in &mut path.path.segments {
                    if let syn::PathArguments::AngleBracketed(args) = &mut segment.arguments {
                        for arg in &mut args.args {
                            match arg {
                                syn::GenericArgument::Type(ty) => name(ty),
                                syn::GenericArgument::Lifetime(lifetime) => named(lifetime),
                                _ => {}
                            }
                        }
                    }
                }
            }
            syn::Type::Tuple(tuple) => tuple.elems.iter_mut().for_each(name),
            syn::Type::Array(array) => name(&mut array.elem),
            syn::Type::Slice(slice) => name(&mut slice.elem),
            syn::Type::Paren(paren) => name(&mut paren.elem),
            syn::Type::Group(group) => name(&mut group.elem),
            _ => {}
        }
    }
    let mut ty = ty.clone();
    name(&mut ty);
    ty
}
