//! `#[state_machine(…)]` on the enum: its table, columns and options.

use syn::{Attribute, Ident, LitStr};

use super::{Attr, MachineAttrs};
use crate::case::RenameRule;
use crate::ctxt::Ctxt;

pub fn machine_attrs(cx: &mut Ctxt, attrs: &[Attribute]) -> MachineAttrs {
    let mut span = None;
    let mut incomplete = false;
    let mut table = Attr::none("table");
    let mut column = Attr::none("column");
    let mut key = Attr::none("key");
    let mut version = Attr::none("version");
    let mut order = Attr::none("order");
    let mut history = Attr::none("history");
    let mut outbox = Attr::none("outbox");
    let mut rename_all = Attr::none("rename_all");
    let mut krate = Attr::none("crate");
    let mut conversions = Attr::none("conversions");
    let mut key_type = Attr::none("key_type");
    for attr in attrs {
        if !attr.path().is_ident("state_machine") {
            continue;
        }
        if span.is_none() {
            span = attr.path().get_ident().map(Ident::span);
        }
        let result = attr.parse_nested_meta(|meta| {
            // #[state_machine(table = "payouts")]
            if meta.path.is_ident("table") {
                table.set_lit(cx, meta.value()?.parse()?);
            // #[state_machine(column = "status")]
            } else if meta.path.is_ident("column") {
                column.set_lit(cx, meta.value()?.parse()?);
            // #[state_machine(key = "id")]
            } else if meta.path.is_ident("key") {
                key.set_lit(cx, meta.value()?.parse()?);
            // #[state_machine(version = "version")]
            } else if meta.path.is_ident("version") {
                version.set_lit(cx, meta.value()?.parse()?);
            // #[state_machine(order = "created_at")]
            } else if meta.path.is_ident("order") {
                order.set_lit(cx, meta.value()?.parse()?);
            // #[state_machine(history = "payout_transitions")]
            } else if meta.path.is_ident("history") {
                history.set_lit(cx, meta.value()?.parse()?);
            // #[state_machine(outbox = "stateguard_outbox")]
            } else if meta.path.is_ident("outbox") {
                outbox.set_lit(cx, meta.value()?.parse()?);
            // #[state_machine(rename_all = "snake_case")]
            } else if meta.path.is_ident("rename_all") {
                let lit: LitStr = meta.value()?.parse()?;
                let Some(rule) = RenameRule::from_str(&lit.value()) else {
                    cx.error(
                        &lit,
                        format!(
                            "unknown rename_all rule {:?}; expected one of {}",
                            lit.value(),
                            RenameRule::names()
                        ),
                    );
                    return Ok(());
                };
                rename_all.set(cx, &lit, (lit.clone(), rule));
            // #[state_machine(crate = "my_stateguard")]
            } else if meta.path.is_ident("crate") {
                let lit: LitStr = meta.value()?.parse()?;
                let path = lit.parse_with(syn::Path::parse_mod_style).map_err(|_| {
                    syn::Error::new_spanned(
                        &lit,
                        "`crate` must be a path such as \"my_stateguard\" or \"::deps::stateguard\"",
                    )
                })?;
                krate.set(cx, &lit, path);
            // #[state_machine(key_type = "i64")]
            } else if meta.path.is_ident("key_type") {
                let lit: LitStr = meta.value()?.parse()?;
                let ty: syn::Type = lit.parse().map_err(|_| {
                    syn::Error::new_spanned(
                        &lit,
                        "`key_type` must be a Rust type, such as \"i64\" or \"(String, i64)\" \
                         for a key of two columns",
                    )
                })?;
                key_type.set(cx, &lit, ty);
            // #[state_machine(conversions = false)]
            } else if meta.path.is_ident("conversions") {
                let lit: syn::Lit = meta.value()?.parse()?;
                let syn::Lit::Bool(flag) = &lit else {
                    return Err(syn::Error::new_spanned(
                        &lit,
                        "`conversions` takes `true` or `false`: `conversions = false` leaves \
                         `Display`, `FromStr` and the sqlx and serde impls to the enum",
                    ));
                };
                conversions.set(cx, &lit, flag.value);
            } else {
                return Err(meta.error(
                    "unknown state_machine attribute; expected `table`, `column`, `key`, \
                     `version`, `order`, `history`, `outbox`, `rename_all`, `crate`, \
                     `key_type` or `conversions`",
                ));
            }
            Ok(())
        });
        if let Err(error) = result {
            incomplete = true;
            cx.push(error);
        }
    }
    MachineAttrs {
        span,
        table: table.get(),
        column: column.get(),
        key: key.get(),
        version: version.get(),
        order: order.get(),
        history: history.get(),
        outbox: outbox.get(),
        rename_all: rename_all.get(),
        krate: krate.get(),
        conversions: conversions.get(),
        key_type: key_type.get(),
        incomplete,
    }
}
