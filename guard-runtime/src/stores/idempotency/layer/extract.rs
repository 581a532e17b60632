//! The handler's side: [`IdempotentTx`], the claim's transaction as an
//! axum extractor.

use std::sync::Arc;

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::http::StatusCode;
use axum::http::request::Parts;
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::dialect::Backend;
use crate::executor::tx::Tx;

use super::Problem;

/// The claim's transaction, shared with the handler while it runs.
pub(super) type Slot<DB> = Arc<Mutex<Option<Tx<'static, DB>>>>;

/// The transaction of the request's work, begun with the claim of its
/// key: the layer stores the response in it and commits both. An
/// extractor; `Option<IdempotentTx<DB>>` on an
/// [optional](super::Idempotent::optional) route.
///
/// It derefs to the [`Tx`]: `&mut *tx` is the transaction
/// (`transition.apply(&mut *tx, key)`), `&mut **tx` its connection
/// (`query.execute(&mut **tx)`). Do not commit it: the layer does, after
/// storing the response.
pub struct IdempotentTx<DB: Backend> {
    guard: OwnedMutexGuard<Option<Tx<'static, DB>>>,
}

impl<DB: Backend> std::ops::Deref for IdempotentTx<DB> {
    type Target = Tx<'static, DB>;

    fn deref(&self) -> &Self::Target {
        self.guard
            .as_ref()
            .expect("the layer holds the transaction while the handler runs")
    }
}

impl<DB: Backend> std::ops::DerefMut for IdempotentTx<DB> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.guard
            .as_mut()
            .expect("the layer holds the transaction while the handler runs")
    }
}

impl<DB: Backend, St: Sync> FromRequestParts<St> for IdempotentTx<DB> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &St) -> Result<Self, Problem> {
        let missing = || {
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "store_failed",
                "the handler takes an IdempotentTx, but the request has none: the route has no \
                 Idempotent layer, or the key is optional and was not sent",
            )
        };
        let slot = parts
            .extensions
            .get::<Slot<DB>>()
            .cloned()
            .ok_or_else(missing)?;
        let guard = slot.lock_owned().await;
        match guard.is_some() {
            true => Ok(IdempotentTx { guard }),
            false => Err(missing()),
        }
    }
}

impl<DB: Backend, St: Sync> OptionalFromRequestParts<St> for IdempotentTx<DB> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &St) -> Result<Option<Self>, Problem> {
        match parts.extensions.get::<Slot<DB>>() {
            None => Ok(None),
            Some(_) => <Self as FromRequestParts<St>>::from_request_parts(parts, state)
                .await
                .map(Some),
        }
    }
}
