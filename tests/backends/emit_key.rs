//! `emit(…)`'s message id is the win's effect key on the paths that move
//! one row (`apply`, `expecting`, `finish`'s follow-up, recovery's), long
//! row keys included: the key shortened to 255 characters that ends in a
//! hash is the id the outbox row carries, and a 1,000-character key moves
//! (on MariaDB the whole key made the message id too long for its
//! column).

use crate::common;

use std::marker::PhantomData;

use common::{Db, TestBackend};
use stateguard::bounds::{BatchKey, Batched, Key};
use stateguard::ddl::Dialect;
use stateguard::{Effect, Finished, StateMachine, Verdict, outbox, recover};

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

backend_tests! {
    impl Tests {
        "emit_key_one" => one_row_paths_write_the_effect_key,
    }
}

/// Row keys around every edge: `long_keys.status:` and `:sending:` with
/// 209 characters between them make 235, the longest prefix kept whole;
/// 210 is the first shortened; 254 to 256 and 1,000 as the issue found.
const LENGTHS: [usize; 6] = [209, 210, 254, 255, 256, 1000];

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
             'pending', version BIGINT NOT NULL DEFAULT 0, sending_since TIMESTAMPTZ)",
            "INSERT INTO long_keys (name) VALUES ($1)",
            "UPDATE long_keys SET sending_since = sending_since - INTERVAL '1 hour'",
        ),
        Dialect::MySql => (
            "CREATE TABLE long_keys (name VARCHAR(1100) CHARACTER SET ascii COLLATE ascii_bin \
             PRIMARY KEY, status VARCHAR(32) NOT NULL DEFAULT 'pending', version BIGINT NOT NULL \
             DEFAULT 0, sending_since DATETIME(3) NULL)",
            "INSERT INTO long_keys (name) VALUES (?)",
            "UPDATE long_keys SET sending_since = sending_since - INTERVAL 1 HOUR",
        ),
        _ => (
            "CREATE TABLE long_keys (name TEXT PRIMARY KEY, status TEXT NOT NULL DEFAULT \
             'pending', version INTEGER NOT NULL DEFAULT 0, sending_since TEXT)",
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
    let mut conn = db.pool.acquire().await.unwrap();
    let mut out = Vec::new();
    for i in 0.. {
        let binds = [common::Bind::Text(topic), common::Bind::Int(i)];
        match DB::fetch_optional::<(String,)>(&mut conn, sql, &binds).await {
            Ok(Some((id,))) => out.push(id),
            Ok(None) => break,
            Err(error) => panic!("{error}"),
        }
    }
    out
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
    String: Key<DB> + BatchKey<DB, stateguard::key::shape::One>,
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
                    async { Verdict::Done }
                })
                .await
                .unwrap();
            assert!(matches!(finished, Finished::Done { .. }), "{finished:?}");
            assert_eq!(*seen.lock().unwrap(), next);
        }
        let sent = ids(&db, "named.sent").await;
        assert_eq!(sent.len(), LENGTHS.len());
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
                async { Verdict::Failed }
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
}

/// The effect key of row `name` in `state` at `occurrence`, computed
/// apart from the library by the documented rule: `long_keys.status:`,
/// the key, the state and `:`, cut to 169 characters and followed by `~`,
/// its SHA-256 in hex and `:` when longer than 235, then the occurrence.
fn effect_key_of(name: &str, state: Named, occurrence: i64) -> String {
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
