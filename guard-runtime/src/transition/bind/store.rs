//! Binding the statements of the library's own tables (the stores' and
//! `verify`'s catalog reads) through their plans of [`Field`]s.

use crate::dialect::sealed::Driver;
use crate::dialect::{Backend, Statement};

use super::bind_tag;

/// What one placeholder of a statement of the library's own tables binds
/// (the stores' and `verify`'s catalog reads): the derive crate writes
/// their statements and plans (`guard-macros/src/stores/`) as it writes a
/// machine's, and names these variants in them.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// An idempotency key's scope.
    Scope,
    /// The client's idempotency key.
    Key,
    /// The inbox's consumer.
    Consumer,
    /// The inbox's or the outbox's message id.
    MessageId,
    /// The outbox message's order key.
    OrderKey,
    /// A table's name, as `verify` reads the catalog.
    Table,
    /// A table's schema (or database), as `verify` reads the catalog.
    Schema,
    /// The outbox message's topic.
    Topic,
    /// The request's fingerprint.
    Fingerprint,
    /// The lease the caller holds.
    Lease,
    /// A number of milliseconds: a lease's length, a pruning window.
    Millis,
    /// The response's status.
    Status,
    /// The response's body.
    Body,
    /// The outbox message's payload.
    Payload,
    /// The response's stored headers, as a JSON array of `[name, value]`
    /// pairs, or NULL.
    Headers,
    /// How many rows at most.
    Limit,
    /// An outbox message's place in the table.
    Seq,
    /// Outbox messages' places, as a JSON array.
    Seqs,
    /// The claim a relay's pass takes messages under.
    Claim,
    /// How many attempts a message may have.
    Attempts,
    /// Why a message failed.
    Reason,
    /// PostgreSQL: the statement's own tag, as a machine's statements bind
    /// it ([`Bind::Tag`]).
    Tag,
}

/// The values one store call supplies; each statement takes what its plan
/// names.
#[derive(Default)]
pub(crate) struct Fields<'a> {
    pub(crate) scope: Option<&'a str>,
    pub(crate) key: Option<&'a str>,
    pub(crate) consumer: Option<&'a str>,
    pub(crate) message_id: Option<&'a str>,
    pub(crate) order_key: Option<&'a str>,
    pub(crate) table: Option<&'a str>,
    pub(crate) schema: Option<&'a str>,
    pub(crate) payload: Option<Vec<u8>>,
    pub(crate) fingerprint: Option<&'a str>,
    pub(crate) topic: Option<&'a str>,
    pub(crate) lease: Option<i64>,
    pub(crate) millis: Option<i64>,
    pub(crate) status: Option<i64>,
    pub(crate) body: Option<Vec<u8>>,
    pub(crate) headers: Option<Option<String>>,
    pub(crate) limit: Option<i64>,
    pub(crate) seq: Option<i64>,
    pub(crate) seqs: Option<&'a str>,
    pub(crate) claim: Option<i64>,
    pub(crate) attempts: Option<i64>,
    pub(crate) reason: Option<&'a str>,
}

/// The arguments of a store's `statement`, in the order of its plan. The
/// body is moved in, once.
pub(crate) fn store_arguments<DB: Backend>(
    statement: Statement<Field>,
    mut fields: Fields<'_>,
) -> Result<<DB as Driver>::Args, sqlx::Error> {
    let mut args = <DB as Driver>::Args::default();
    for &field in statement.binds() {
        let missing = || {
            sqlx::Error::Protocol(format!(
                "the statement binds {field:?}, which this call does not supply"
            ))
        };
        let text = |value: Option<&str>| value.map(str::to_owned).ok_or_else(missing);
        match field {
            Field::Scope => DB::bind_text(&mut args, Some(text(fields.scope)?))?,
            Field::Key => DB::bind_text(&mut args, Some(text(fields.key)?))?,
            Field::Consumer => DB::bind_text(&mut args, Some(text(fields.consumer)?))?,
            Field::MessageId => DB::bind_text(&mut args, Some(text(fields.message_id)?))?,
            Field::OrderKey => DB::bind_text(&mut args, Some(text(fields.order_key)?))?,
            Field::Table => DB::bind_text(&mut args, Some(text(fields.table)?))?,
            Field::Schema => DB::bind_text(&mut args, Some(text(fields.schema)?))?,
            Field::Fingerprint => DB::bind_text(&mut args, Some(text(fields.fingerprint)?))?,
            Field::Topic => DB::bind_text(&mut args, Some(text(fields.topic)?))?,
            Field::Lease => DB::bind_int(&mut args, fields.lease.ok_or_else(missing)?)?,
            Field::Millis => DB::bind_int(&mut args, fields.millis.ok_or_else(missing)?)?,
            Field::Status => DB::bind_int(&mut args, fields.status.ok_or_else(missing)?)?,
            Field::Body => DB::bind_bytes(&mut args, fields.body.take().ok_or_else(missing)?)?,
            Field::Payload => {
                DB::bind_bytes(&mut args, fields.payload.take().ok_or_else(missing)?)?
            }
            Field::Headers => DB::bind_text(&mut args, fields.headers.take().ok_or_else(missing)?)?,
            Field::Limit => DB::bind_int(&mut args, fields.limit.ok_or_else(missing)?)?,
            Field::Seq => DB::bind_int(&mut args, fields.seq.ok_or_else(missing)?)?,
            Field::Seqs => DB::bind_text(&mut args, Some(text(fields.seqs)?))?,
            Field::Claim => DB::bind_int(&mut args, fields.claim.ok_or_else(missing)?)?,
            Field::Attempts => DB::bind_int(&mut args, fields.attempts.ok_or_else(missing)?)?,
            Field::Reason => DB::bind_text(&mut args, Some(text(fields.reason)?))?,
            Field::Tag => bind_tag::<DB, _>(statement, &mut args)?,
        }
    }
    Ok(args)
}
