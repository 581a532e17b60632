//! `emit(…)`'s message id is the win's effect key on every path that
//! moves rows: one row (`apply`, `expecting`, `finish`'s follow-up,
//! recovery's) and a batch (`apply_many`, claims, `finish_many`'s
//! follow-ups, with and without values bound per row, and
//! `recover_many`'s), long row keys included: the key shortened to 255
//! characters that ends in a hash is the id the outbox row carries, and a
//! 1,000-character key moves (on MariaDB the whole key made the message
//! id too long for its column).

use crate::common;

use std::marker::PhantomData;

use common::{Db, TestBackend};
use stateguard::bounds::{Batchable, Batched, Key};
use stateguard::ddl::Dialect;
use stateguard::{
    Effect, Finished, Outcome, StateMachine, Tx, Verdict, Won, finish_many, outbox, recover,
    recover_many,
};

/// A table keyed by text of any length, every move of which announces
/// itself.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "long_keys",
    column = "status",
    key = "name",
    version = "version"
)]
enum Named {
    #[state(initial)]
    #[transition(start -> Sending, emit("named.sending"))]
    #[transition(cancel -> Cancelled, emit("named.cancelled"))]
    Pending,
    #[state(in_flight(lease = "150ms", since = "sending_since", done = confirm, failed = decline))]
    #[transition(confirm -> Sent, emit("named.sent"))]
    #[transition(decline -> Failed, emit("named.failed"))]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

/// The same table, with a follow-up that binds a value per row: a batch
/// of its verdicts goes row by row, each row's cells bound apart.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "long_keys",
    column = "status",
    key = "name",
    version = "version"
)]
pub(crate) enum Noted {
    #[state(initial)]
    #[transition(start -> Sending, emit("noted.sending"))]
    Pending,
    #[state(in_flight(lease = "150ms", since = "sending_since", done = confirm, failed = decline))]
    #[transition(confirm -> Sent, set(note = bind(String)), emit("noted.sent", payload(note)))]
    #[transition(decline -> Failed, emit("noted.failed"))]
    Sending,
    Sent,
    Failed,
}

backend_tests! {
    impl Tests {
        "emit_key_one" => one_row_paths_write_the_effect_key,
        "emit_key_many" => apply_many_writes_the_effect_key,
        "emit_key_claim" => claims_write_the_effect_key,
        "emit_key_finish_many" => finish_many_writes_the_effect_key,
    }
}

/// Row keys around every edge: `long_keys.status:` and `:sending:` with
/// 209 characters between them make 235, the longest prefix kept whole;
/// 210 is the first shortened; 254 to 256 and 1,000 as the issue found;
/// 3,000, whose order key is longer than MySQL's outbox column holds.
const LENGTHS: [usize; 7] = [209, 210, 254, 255, 256, 1000, 3000];

/// A row key of `len` characters, different for each `tag`.
fn name(tag: char, len: usize) -> String {
    let mut name = String::with_capacity(len);
    name.push(tag);
    name.push_str(&"n".repeat(len - 2));
    name.push(tag);
    name
}

/// The `long_keys` table with a pending row for each of `names`, and the
/// outbox.
async fn setup<DB: TestBackend>(db: &Db<DB>, names: &[String]) {
    let mut conn = db.pool.acquire().await.unwrap();
    let (create, insert, _) = statements::<DB>();
    DB::execute(&mut conn, create, &[]).await.unwrap();
    for statement in outbox::ddl(DB::DIALECT) {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
    for name in names {
        DB::execute(&mut conn, insert, &[common::Bind::Text(name)])
            .await
            .unwrap();
    }
}

/// The table, a row's insert and the backdating of every lease.
fn statements<DB: TestBackend>() -> (&'static str, &'static str, &'static str) {
    match DB::DIALECT {
        Dialect::Postgres => (
            "CREATE TABLE long_keys (name TEXT PRIMARY KEY, status TEXT NOT NULL DEFAULT \
             'pending', version BIGINT NOT NULL DEFAULT 0, sending_since TIMESTAMPTZ, note TEXT)",
            "INSERT INTO long_keys (name) VALUES ($1)",
            "UPDATE long_keys SET sending_since = sending_since - INTERVAL '1 hour'",
        ),
        Dialect::MySql => (
            "CREATE TABLE long_keys (name VARCHAR(3072) CHARACTER SET ascii COLLATE ascii_bin \
             PRIMARY KEY, status VARCHAR(32) NOT NULL DEFAULT 'pending', version BIGINT NOT NULL \
             DEFAULT 0, sending_since DATETIME(3) NULL, note TEXT NULL)",
            "INSERT INTO long_keys (name) VALUES (?)",
            "UPDATE long_keys SET sending_since = sending_since - INTERVAL 1 HOUR",
        ),
        _ => (
            "CREATE TABLE long_keys (name TEXT PRIMARY KEY, status TEXT NOT NULL DEFAULT \
             'pending', version INTEGER NOT NULL DEFAULT 0, sending_since TEXT, note TEXT)",
            "INSERT INTO long_keys (name) VALUES (?1)",
            "UPDATE long_keys SET sending_since = strftime('%Y-%m-%d %H:%M:%f', sending_since, \
             '-1 hours')",
        ),
    }
}

/// Backdates every lease, so that recovery takes the rows over.
async fn backdate<DB: TestBackend>(db: &Db<DB>) {
    let mut conn = db.pool.acquire().await.unwrap();
    DB::execute(&mut conn, statements::<DB>().2, &[])
        .await
        .unwrap();
}

/// The ids of the messages with topic `topic`, in the order written.
async fn ids<DB: TestBackend>(db: &Db<DB>, topic: &str) -> Vec<String> {
    let sql = match DB::DIALECT {
        Dialect::MySql => {
            "SELECT CAST(message_id AS CHAR) FROM stateguard_outbox WHERE topic = ? ORDER BY seq \
             LIMIT 1 OFFSET ?"
        }
        Dialect::Postgres => {
            "SELECT message_id FROM stateguard_outbox WHERE topic = $1 ORDER BY seq LIMIT 1 \
             OFFSET $2"
        }
        _ => {
            "SELECT message_id FROM stateguard_outbox WHERE topic = ?1 ORDER BY seq LIMIT 1 \
             OFFSET ?2"
        }
    };
    texts(db, sql, topic).await
}

/// The order keys of the messages with topic `topic`, in the order
/// written.
async fn order_keys<DB: TestBackend>(db: &Db<DB>, topic: &str) -> Vec<String> {
    let sql = match DB::DIALECT {
        Dialect::MySql => {
            "SELECT CAST(order_key AS CHAR) FROM stateguard_outbox WHERE topic = ? ORDER BY seq \
             LIMIT 1 OFFSET ?"
        }
        Dialect::Postgres => {
            "SELECT order_key FROM stateguard_outbox WHERE topic = $1 ORDER BY seq LIMIT 1 \
             OFFSET $2"
        }
        _ => {
            "SELECT order_key FROM stateguard_outbox WHERE topic = ?1 ORDER BY seq LIMIT 1 \
             OFFSET ?2"
        }
    };
    texts(db, sql, topic).await
}

/// The text column `sql` reads of each message with topic `topic`.
async fn texts<DB: TestBackend>(db: &Db<DB>, sql: &'static str, topic: &str) -> Vec<String> {
    let mut conn = db.pool.acquire().await.unwrap();
    let mut out = Vec::new();
    for i in 0.. {
        let binds = [common::Bind::Text(topic), common::Bind::Int(i)];
        match DB::fetch_optional::<(String,)>(&mut conn, sql, &binds).await {
            Ok(Some((text,))) => out.push(text),
            Ok(None) => break,
            Err(error) => panic!("{error}"),
        }
    }
    out
}

/// Asserts that the order keys of `names`' messages, in that order, are
/// `long_keys.status:name`, except on MySQL, where one over 255
/// characters is its first 169, `~` and a SHA-256 in hex: short enough
/// for its column, and different for every row.
fn assert_order_keys<DB: TestBackend>(order_keys: &[String], names: &[String]) {
    assert_eq!(order_keys.len(), names.len());
    for (order_key, name) in order_keys.iter().zip(names) {
        let full = format!("long_keys.status:{name}");
        match (DB::DIALECT, full.len() <= 255) {
            (Dialect::MySql, false) => {
                assert_eq!(order_key.len(), 234, "{order_key}");
                assert_eq!(order_key[..169], full[..169]);
                assert_eq!(order_key.as_bytes()[169], b'~', "{order_key}");
                assert!(order_key[170..].bytes().all(|b| b.is_ascii_hexdigit()));
            }
            _ => assert_eq!(*order_key, full),
        }
    }
    let distinct: std::collections::BTreeSet<&String> = order_keys.iter().collect();
    assert_eq!(distinct.len(), order_keys.len(), "{order_keys:?}");
}

/// Asserts that each effect key is at most 255 characters, ends in the
/// occurrence, and is shortened exactly when its prefix is longer than
/// 235.
fn assert_shape(keys: &[String], occurrence: i64) {
    for key in keys {
        assert!(key.len() <= 255, "{} characters: {key}", key.len());
        assert!(key.ends_with(&format!(":{occurrence}")), "{key}");
    }
}

/// The bodies `backend_tests!` runs on each backend.
pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend + Batched> Tests<DB>
where
    String: Key<DB> + Batchable<DB, stateguard::key::shape::One>,
{
    /// `apply`, `apply` with `expecting`, `finish`'s follow-up and
    /// recovery's each write the win's effect key as the message id.
    pub(crate) async fn one_row_paths_write_the_effect_key(db: Db<DB>) {
        let started: Vec<String> = LENGTHS.iter().map(|&n| name('a', n)).collect();
        let expected: Vec<String> = LENGTHS.iter().map(|&n| name('b', n)).collect();
        let recovered: Vec<String> = LENGTHS.iter().map(|&n| name('c', n)).collect();
        setup(
            &db,
            &[started.clone(), expected.clone(), recovered.clone()].concat(),
        )
        .await;

        // apply, then finish: the effect sees the key the outbox holds.
        let mut keys = Vec::new();
        let mut wins = Vec::new();
        for name in &started {
            let won = Named::start().apply(&db.pool, name.clone()).await.unwrap();
            let won = won.won().expect("a pending row moves");
            keys.push(won.effect_key());
            wins.push(won);
        }
        assert_eq!(ids(&db, "named.sending").await, keys);
        assert_shape(&keys, 1);
        for (key, name) in keys.iter().zip(&started) {
            assert_eq!(*key, effect_key_of(name, Named::Sending, 1));
        }
        assert!(!keys[0].contains('~') && keys[1].contains('~'), "{keys:?}");
        for won in wins {
            let next = won.effect_key();
            let seen = std::sync::Mutex::new(String::new());
            let finished = won
                .finish(&db.pool, |effect: Effect<Named, String>| {
                    *seen.lock().unwrap() = effect.effect_key().to_owned();
                    async { Verdict::done() }
                })
                .await
                .unwrap();
            assert!(matches!(finished, Finished::Done { .. }), "{finished:?}");
            assert_eq!(*seen.lock().unwrap(), next);
        }
        let sent = ids(&db, "named.sent").await;
        assert_eq!(sent.len(), LENGTHS.len());
        // A row's messages share its order key: both moves of each.
        let order = order_keys(&db, "named.sending").await;
        assert_order_keys::<DB>(&order, &started);
        assert_eq!(order_keys(&db, "named.sent").await, order);
        assert_shape(&sent, 2);
        for (id, name) in sent.iter().zip(&started) {
            assert_eq!(*id, effect_key_of(name, Named::Sent, 2));
        }

        // expecting.
        let mut keys = Vec::new();
        for name in &expected {
            let won = Named::cancel()
                .expecting(0)
                .apply(&db.pool, name.clone())
                .await
                .unwrap();
            keys.push(won.won().expect("a current row moves").effect_key());
        }
        assert_eq!(ids(&db, "named.cancelled").await, keys);
        assert_shape(&keys, 1);

        // recovery: the effect's key and the follow-up's message.
        for name in &recovered {
            let won = Named::start().apply(&db.pool, name.clone()).await.unwrap();
            assert!(won.is_applied());
        }
        backdate(&db).await;
        let seen = std::sync::Mutex::new(Vec::new());
        let report = recover(
            &db.pool,
            Named::Sending,
            100,
            |effect: Effect<Named, String>| {
                seen.lock()
                    .unwrap()
                    .push((effect.key().clone(), effect.effect_key().to_owned()));
                async { Verdict::failed() }
            },
        )
        .await
        .unwrap();
        assert_eq!(report.failed, LENGTHS.len(), "{report:?}");
        let mut failed = ids(&db, "named.failed").await;
        failed.sort();
        let mut want = Vec::new();
        for name in &recovered {
            want.push(effect_key_of(name, Named::Failed, 2));
        }
        want.sort();
        assert_eq!(failed, want);
        assert_shape(&failed, 2);
        for (name, key) in seen.into_inner().unwrap() {
            assert_eq!(key, effect_key_of(&name, Named::Sending, 1));
        }
    }

    /// `apply_many` on a pool and in the caller's transaction: each win's
    /// message carries its effect key.
    pub(crate) async fn apply_many_writes_the_effect_key(db: Db<DB>) {
        let pooled: Vec<String> = LENGTHS.iter().map(|&n| name('a', n)).collect();
        let in_tx: Vec<String> = LENGTHS.iter().map(|&n| name('b', n)).collect();
        setup(&db, &[pooled.clone(), in_tx.clone()].concat()).await;

        let outcomes = Named::start().apply_many(&db.pool, &pooled).await.unwrap();
        let mut keys = Vec::new();
        for (outcome, name) in outcomes.into_iter().zip(&pooled) {
            let won = outcome.won().expect("a pending row moves");
            assert_eq!(won.effect_key(), effect_key_of(name, Named::Sending, 1));
            keys.push(won.effect_key());
        }
        assert_shape(&keys, 1);
        assert_eq!(sorted(ids(&db, "named.sending").await), sorted(keys));

        let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
        let outcomes = Named::cancel().apply_many(&mut tx, &in_tx).await.unwrap();
        let mut keys = Vec::new();
        for (outcome, name) in outcomes.iter().zip(&in_tx) {
            let Outcome::Applied(won) = outcome else {
                panic!("{name}: {outcome:?}");
            };
            assert_eq!(won.effect_key(), effect_key_of(name, Named::Cancelled, 1));
            keys.push(won.effect_key());
        }
        tx.commit(()).await.unwrap();
        assert_eq!(sorted(ids(&db, "named.cancelled").await), sorted(keys));
    }

    /// A claim on a pool and one in the caller's transaction: each win's
    /// message carries its effect key.
    pub(crate) async fn claims_write_the_effect_key(db: Db<DB>) {
        let first: Vec<String> = LENGTHS.iter().map(|&n| name('a', n)).collect();
        let second: Vec<String> = LENGTHS.iter().map(|&n| name('b', n)).collect();
        setup(&db, &[first.clone(), second.clone()].concat()).await;
        let n = LENGTHS.len() as u32;

        // The rows come in key order: the first names, then the second.
        let wins: Vec<Won<Named, String>> = Named::start().claim(&db.pool, n).await.unwrap();
        let mut keys = Vec::new();
        for won in &wins {
            assert!(first.contains(won.key()), "{:?}", won.key());
            assert_eq!(
                won.effect_key(),
                effect_key_of(won.key(), Named::Sending, 1)
            );
            keys.push(won.effect_key());
        }
        assert_eq!(keys.len(), first.len());
        assert_shape(&keys, 1);
        assert_eq!(
            sorted(ids(&db, "named.sending").await),
            sorted(keys.clone())
        );

        let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
        let wins = Named::start().claim::<_, String>(&mut tx, n).await.unwrap();
        for won in &wins {
            assert!(second.contains(won.key()), "{:?}", won.key());
            assert_eq!(
                won.effect_key(),
                effect_key_of(won.key(), Named::Sending, 1)
            );
            keys.push(won.effect_key());
        }
        assert_eq!(keys.len(), first.len() + second.len());
        drop(wins);
        tx.commit(()).await.unwrap();
        assert_eq!(sorted(ids(&db, "named.sending").await), sorted(keys));
    }

    /// `finish_many`'s follow-ups, batched with one document (or array)
    /// per batch and with values bound row by row, and `recover_many`'s:
    /// each message carries the effect key of the follow-up's win, and
    /// each effect ran with its row's.
    pub(crate) async fn finish_many_writes_the_effect_key(db: Db<DB>)
    where
        Noted: stateguard::bounds::FollowUpValues<DB>,
    {
        let batched: Vec<String> = LENGTHS.iter().map(|&n| name('a', n)).collect();
        let by_row: Vec<String> = LENGTHS.iter().map(|&n| name('b', n)).collect();
        let recovered: Vec<String> = LENGTHS.iter().map(|&n| name('c', n)).collect();
        setup(
            &db,
            &[batched.clone(), by_row.clone(), recovered.clone()].concat(),
        )
        .await;
        // Keys of an even length are done, the others failed.
        let done = |name: &String| name.len().is_multiple_of(2);
        let (sent, failed): (Vec<String>, Vec<String>) =
            batched.iter().cloned().partition(|name| done(name));
        assert!(!sent.is_empty() && !failed.is_empty());

        // One document (or array) per batch.
        let wins = Named::start().apply_many(&db.pool, &batched).await.unwrap();
        let wins: Vec<Won<Named, String>> = wins.into_iter().filter_map(Outcome::won).collect();
        let rows = finish_many(&db.pool, wins, 4, |effect: Effect<Named, String>| {
            assert_eq!(
                effect.effect_key(),
                effect_key_of(effect.key(), Named::Sending, 1)
            );
            let verdict = match done(effect.key()) {
                true => Verdict::done(),
                false => Verdict::failed(),
            };
            async move { verdict }
        })
        .await
        .unwrap();
        for row in &rows {
            let finished = row.finished.as_ref().unwrap();
            match done(&row.key) {
                true => assert!(matches!(finished, Finished::Done { .. }), "{finished:?}"),
                false => assert!(matches!(finished, Finished::Failed { .. }), "{finished:?}"),
            }
        }
        assert_eq!(rows.len(), batched.len());
        let sent_ids = ids(&db, "named.sent").await;
        assert_shape(&sent_ids, 2);
        assert_eq!(sorted(sent_ids), expected(&sent, Named::Sent, 2));
        assert_eq!(
            sorted(ids(&db, "named.failed").await),
            expected(&failed, Named::Failed, 2)
        );

        // Values bound row by row.
        let wins = Noted::start().apply_many(&db.pool, &by_row).await.unwrap();
        let wins: Vec<Won<Noted, String>> = wins.into_iter().filter_map(Outcome::won).collect();
        let rows = finish_many(&db.pool, wins, 4, |effect: Effect<Noted, String>| {
            let verdict = match done(effect.key()) {
                true => Noted::confirm(format!("{} characters", effect.key().len())).into(),
                false => Verdict::failed(),
            };
            async move { verdict }
        })
        .await
        .unwrap();
        assert!(rows.iter().all(|row| row.finished.is_ok()), "{rows:?}");
        let (sent, failed): (Vec<String>, Vec<String>) =
            by_row.iter().cloned().partition(|name| done(name));
        assert_eq!(
            sorted(ids(&db, "noted.sent").await),
            expected(&sent, Noted::Sent, 2)
        );
        assert_eq!(
            sorted(ids(&db, "noted.failed").await),
            expected(&failed, Noted::Failed, 2)
        );

        // Recovery of a batch whose claimer died.
        let wins = Named::start()
            .apply_many(&db.pool, &recovered)
            .await
            .unwrap();
        assert!(wins.iter().all(Outcome::is_applied));
        drop(wins);
        backdate(&db).await;
        let report = recover_many(
            &db.pool,
            Named::Sending,
            100,
            4,
            |effect: Effect<Named, String>| {
                assert_eq!(
                    effect.effect_key(),
                    effect_key_of(effect.key(), Named::Sending, 1)
                );
                let verdict = match done(effect.key()) {
                    true => Verdict::done(),
                    false => Verdict::failed(),
                };
                async move { verdict }
            },
        )
        .await
        .unwrap();
        let sent_now = recovered.iter().filter(|name| done(name)).count();
        assert_eq!(
            (report.done, report.failed),
            (sent_now, recovered.len() - sent_now),
            "{report:?}"
        );
        let all_sent: Vec<String> = batched
            .iter()
            .chain(&recovered)
            .filter(|name| done(name))
            .cloned()
            .collect();
        assert_eq!(
            sorted(ids(&db, "named.sent").await),
            expected(&all_sent, Named::Sent, 2)
        );
        let all_failed: Vec<String> = batched
            .iter()
            .chain(&recovered)
            .filter(|name| !done(name))
            .cloned()
            .collect();
        assert_eq!(
            sorted(ids(&db, "named.failed").await),
            expected(&all_failed, Named::Failed, 2)
        );
    }
}

/// The effect keys of rows `names` in `state` at `occurrence`, sorted.
fn expected<S: StateMachine>(names: &[String], state: S, occurrence: i64) -> Vec<String> {
    sorted(
        names
            .iter()
            .map(|name| effect_key_of(name, state, occurrence))
            .collect(),
    )
}

/// `keys`, sorted: the order in which a batch writes its messages is its
/// own.
fn sorted(mut keys: Vec<String>) -> Vec<String> {
    keys.sort();
    keys
}

/// The effect key of row `name` in `state` at `occurrence`, computed
/// apart from the library by the documented rule: `long_keys.status:`,
/// the key, the state and `:`, cut to 169 characters and followed by `~`,
/// its SHA-256 in hex and `:` when longer than 235, then the occurrence.
fn effect_key_of<S: StateMachine>(name: &str, state: S, occurrence: i64) -> String {
    use sha2::Digest as _;

    let prefix = format!("long_keys.status:{name}:{}:", state.as_str());
    if prefix.len() <= 235 {
        return format!("{prefix}{occurrence}");
    }
    let hash: String = sha2::Sha256::digest(prefix.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("{}~{hash}:{occurrence}", &prefix[..169])
}
