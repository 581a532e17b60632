//! Composite keys: `key = "tenant_id, id"` matches on both columns, so a
//! transition never touches another tenant's row, whatever id it is given,
//! and effect keys, recovery and the follow-ups carry every key part.

use crate::common;
use crate::common::KeyColumn;

use std::marker::PhantomData;

use common::{Db, TestBackend};
use stateguard::bounds::{Batched, Key, ManyKeys};
use stateguard::console::{Console, ConsoleKey};
use stateguard::{Effect, Finished, Outcome, StateMachine, claim_expired, recover};

/// Transfers of many tenants, each numbering its own from 1.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "tenant_transfers",
    column = "status",
    key = "tenant_id, id",
    version = "version"
)]
enum TenantTransfer {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(cancel -> Cancelled, guard("id >= :from", from = bind(i64)))]
    Pending,
    #[state(in_flight(lease = "150ms", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, set(bank_ref = bind(String)))]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

type TenantKey = (String, i64);

fn key(tenant: &str, id: i64) -> TenantKey {
    (tenant.to_owned(), id)
}

backend_tests! {
    impl Tests {
        "tenant_isolation" => a_tenant_never_moves_another_tenants_row,
        "tenant_recovery" => recovery_and_follow_ups_carry_every_key_part,
        "tenant_ddl" => the_database_enforces_a_machine_with_a_composite_key,
        "tenant_claims" => claims_take_composite_keys_in_order,
        "tenant_pages" => pages_of_composite_keys_skip_and_repeat_nothing,
    }
}

/// `acme` transfers 1 and 2, `globex` transfers 1 and 3.
async fn tenants<DB: TestBackend>(db: &Db<DB>) {
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in [
        DB::CREATE_TENANT_TRANSFERS,
        "INSERT INTO tenant_transfers (tenant_id, id) VALUES
            ('acme', 1), ('acme', 2), ('globex', 1), ('globex', 3)",
    ] {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
}

/// The state and occurrence of `key`, read through `load`.
async fn state<DB: TestBackend>(db: &Db<DB>, key: TenantKey) -> Option<(TenantTransfer, i64)>
where
    i64: Key<DB>,
    String: Key<DB>,
{
    let current = TenantTransfer::MACHINE.load(&db.pool, key).await.unwrap();
    current.map(|c| (c.state(), c.occurrence()))
}

/// The bodies `backend_tests!` runs on each backend; the bounds they share
/// are written once, on this block.
struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend + Batched> Tests<DB>
where
    i64: KeyColumn<DB>,
    String: KeyColumn<DB>,
    TenantKey: ManyKeys<DB, stateguard::key::shape::Two> + ConsoleKey<TenantTransfer, DB>,
{
    async fn a_tenant_never_moves_another_tenants_row(db: Db<DB>) {
        tenants(&db).await;
        let acme = TenantTransfer::start()
            .apply(&db.pool, key("acme", 1))
            .await
            .unwrap()
            .won()
            .expect("acme 1 is pending");
        // The same id of the other tenant is untouched.
        assert_eq!(
            state(&db, key("globex", 1)).await,
            Some((TenantTransfer::Pending, 0))
        );
        // An id only the other tenant has is not found, whichever way it is spelled.
        for tenant in ["acme", "ACME", "acme ", "globex"] {
            let id = if tenant == "globex" { 2 } else { 3 };
            assert_eq!(
                TenantTransfer::start()
                    .apply(&db.pool, key(tenant, id))
                    .await
                    .unwrap(),
                Outcome::NotFound,
                "{tenant} {id}"
            );
        }
        assert_eq!(
            state(&db, key("globex", 3)).await,
            Some((TenantTransfer::Pending, 0))
        );
        let globex = TenantTransfer::start()
            .apply(&db.pool, key("globex", 1))
            .await
            .unwrap()
            .won()
            .expect("globex 1 is pending");
        // Effect keys name every key part, so the two tenants' transfer 1
        // never share one.
        assert_eq!(
            acme.effect_key(),
            "tenant_transfers.status:acme/1:sending:1"
        );
        assert_eq!(
            globex.effect_key(),
            "tenant_transfers.status:globex/1:sending:1"
        );
        assert_eq!(
            TenantTransfer::start()
                .apply(&db.pool, key("acme", 1))
                .await
                .unwrap(),
            Outcome::AlreadyInState(TenantTransfer::Sending)
        );
        // Guard values and an expected occurrence are numbered after both
        // key values.
        assert_eq!(
            TenantTransfer::cancel(5)
                .apply(&db.pool, key("acme", 2))
                .await
                .unwrap(),
            Outcome::Refused {
                current: TenantTransfer::Pending
            }
        );
        assert_eq!(
            TenantTransfer::cancel(3)
                .expecting(1)
                .apply(&db.pool, key("globex", 3))
                .await
                .unwrap(),
            Outcome::Stale {
                current: TenantTransfer::Pending,
                occurrence: 0
            }
        );
        assert!(
            TenantTransfer::cancel(3)
                .expecting(0)
                .apply(&db.pool, key("globex", 3))
                .await
                .unwrap()
                .is_applied()
        );
        assert_eq!(
            state(&db, key("globex", 3)).await,
            Some((TenantTransfer::Cancelled, 1))
        );
        assert_eq!(
            state(&db, key("acme", 2)).await,
            Some((TenantTransfer::Pending, 0))
        );

        // A claim reads every key part back: the pending transfers, in key
        // order (the default order), none of them another tenant's twice.
        let claimed = TenantTransfer::start()
            .claim::<_, TenantKey>(&db.pool, 10)
            .await
            .unwrap();
        let claimed: Vec<TenantKey> = claimed.iter().map(|w| w.key().clone()).collect();
        assert_eq!(claimed, [key("acme", 2)]);
        assert_eq!(
            TenantTransfer::fail()
                .apply(&db.pool, key("acme", 2))
                .await
                .unwrap()
                .state(),
            Some(TenantTransfer::Failed)
        );

        // A batch matches every key part too.
        let outcomes = TenantTransfer::start()
            .apply_many(
                &db.pool,
                &[
                    key("acme", 2),
                    key("acme", 3),
                    key("ACME", 2),
                    key("globex", 1),
                ],
            )
            .await
            .unwrap();
        assert_eq!(
            outcomes,
            [
                Outcome::Conflict {
                    current: TenantTransfer::Failed
                },
                Outcome::NotFound,
                Outcome::NotFound,
                Outcome::AlreadyInState(TenantTransfer::Sending)
            ]
        );
        let failed = TenantTransfer::fail()
            .apply_many(
                &db.pool,
                &[key("globex", 1), key("ACME", 1), key("acme", 1)],
            )
            .await
            .unwrap();
        let keys: Vec<Option<TenantKey>> = failed
            .iter()
            .map(|o| match o {
                Outcome::Applied(won) => Some(won.key().clone()),
                _ => None,
            })
            .collect();
        assert_eq!(keys, [Some(key("globex", 1)), None, Some(key("acme", 1))]);
        assert_eq!(
            state(&db, key("globex", 1)).await,
            Some((TenantTransfer::Failed, 2))
        );
    }

    async fn recovery_and_follow_ups_carry_every_key_part(db: Db<DB>) {
        tenants(&db).await;
        // Both tenants' transfer 1 start; their workers die before the effect.
        let mut lost = Vec::new();
        for tenant in ["acme", "globex"] {
            let won = TenantTransfer::start()
                .apply(&db.pool, key(tenant, 1))
                .await
                .unwrap()
                .won()
                .unwrap();
            lost.push(won.effect_key());
        }
        let mut conn = db.pool.acquire().await.unwrap();
        DB::execute(&mut conn, DB::BACKDATE_TENANT_LEASES, &[])
            .await
            .unwrap();
        drop(conn);

        // Taking the rows over reads both key parts back: the same rows, the
        // same effect keys as the lost wins.
        let claimed: Vec<_> =
            claim_expired::<TenantTransfer, TenantKey, _>(&db.pool, TenantTransfer::Sending, 10)
                .await
                .unwrap();
        let mut keys: Vec<_> = claimed.iter().map(|w| w.key().clone()).collect();
        keys.sort();
        assert_eq!(keys, [key("acme", 1), key("globex", 1)]);
        let mut effect_keys: Vec<_> = claimed.iter().map(|w| w.effect_key()).collect();
        effect_keys.sort();
        assert_eq!(effect_keys, lost);

        // The acme row is finished by its taker, binding the reference after
        // both key values and the lease.
        let acme = claimed.into_iter().find(|w| w.key().0 == "acme").unwrap();
        let finished = acme
            .finish(
                &db.pool,
                |effect: Effect<TenantTransfer, TenantKey>| async move {
                    TenantTransfer::confirm(format!("ref-{}", effect.key().0)).into()
                },
            )
            .await
            .unwrap();
        assert!(
            matches!(
                finished,
                Finished::Done {
                    state: TenantTransfer::Sent,
                    ..
                }
            ),
            "{finished:?}"
        );
        assert_eq!(bank_ref(&db, "acme").await, Some("ref-acme".to_owned()));

        // The globex row's lease runs out again; recovery finishes it.
        let mut conn = db.pool.acquire().await.unwrap();
        DB::execute(&mut conn, DB::BACKDATE_TENANT_LEASES, &[])
            .await
            .unwrap();
        drop(conn);
        let report = recover(
            &db.pool,
            TenantTransfer::Sending,
            10,
            |effect: Effect<TenantTransfer, TenantKey>| async move {
                TenantTransfer::confirm(format!("ref-{}", effect.key().0)).into()
            },
        )
        .await
        .unwrap();
        assert_eq!((report.claimed, report.done), (1, 1), "{report:?}");
        assert_eq!(bank_ref(&db, "globex").await, Some("ref-globex".to_owned()));
        assert_eq!(
            state(&db, key("globex", 1)).await,
            Some((TenantTransfer::Sent, 2))
        );
        // The other transfers never moved.
        assert_eq!(
            state(&db, key("acme", 2)).await,
            Some((TenantTransfer::Pending, 0))
        );
    }

    /// The enforcement DDL of a machine with a composite key: transitions
    /// through stateguard pass, a raw update that skips a state does not.
    async fn the_database_enforces_a_machine_with_a_composite_key(db: Db<DB>) {
        tenants(&db).await;
        let ddl = stateguard::ddl::generate::<TenantTransfer>(DB::DIALECT);
        let mut conn = db.pool.acquire().await.unwrap();
        for statement in ddl.up() {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
        assert!(
            TenantTransfer::start()
                .apply(&db.pool, key("acme", 1))
                .await
                .unwrap()
                .is_applied()
        );
        assert!(
            TenantTransfer::cancel(0)
                .apply(&db.pool, key("globex", 3))
                .await
                .unwrap()
                .is_applied()
        );
        let skip = DB::execute(
            &mut conn,
            "UPDATE tenant_transfers SET status = 'sent' WHERE tenant_id = 'acme' AND id = 2",
            &[],
        )
        .await;
        assert!(skip.is_err(), "pending -> sent must be refused: {skip:?}");
        assert_eq!(
            state(&db, key("acme", 2)).await,
            Some((TenantTransfer::Pending, 0))
        );
    }

    /// Claims over a composite key: rows come in key order (tenant, then id),
    /// every key part read back, each win's occurrence the stored one; a
    /// claim with a guard takes only the rows that pass it, with its bound
    /// value; and the claimed rows finish under their leases.
    async fn claims_take_composite_keys_in_order(db: Db<DB>) {
        let mut conn = db.pool.acquire().await.unwrap();
        for statement in [
            DB::CREATE_TENANT_TRANSFERS,
            "INSERT INTO tenant_transfers (tenant_id, id) VALUES
            ('globex', 2), ('acme', 3), ('globex', 1), ('acme', 1), ('acme', 2),
            ('initech', 1), ('globex', 3)",
        ] {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
        drop(conn);

        // A guarded claim: only ids of 3 or more, with the bound value.
        let cancelled = TenantTransfer::cancel(3)
            .claim::<_, TenantKey>(&db.pool, 10)
            .await
            .unwrap();
        let keys: Vec<TenantKey> = cancelled.iter().map(|w| w.key().clone()).collect();
        assert_eq!(keys, [key("acme", 3), key("globex", 3)]);

        // A batch of three, then the last two: key order across tenants.
        let mut claimed = Vec::new();
        for expected in [3, 2, 0] {
            let batch = TenantTransfer::start()
                .claim::<_, TenantKey>(&db.pool, 3)
                .await
                .unwrap();
            assert_eq!(batch.len(), expected);
            claimed.extend(batch);
        }
        let keys: Vec<TenantKey> = claimed.iter().map(|w| w.key().clone()).collect();
        assert_eq!(
            keys,
            [
                key("acme", 1),
                key("acme", 2),
                key("globex", 1),
                key("globex", 2),
                key("initech", 1)
            ]
        );
        for won in &claimed {
            assert_eq!(won.occurrence(), 1);
            assert_eq!(
                state(&db, won.key().clone()).await,
                Some((TenantTransfer::Sending, 1))
            );
        }
        let mut effect_keys: Vec<String> = claimed.iter().map(|w| w.effect_key()).collect();
        effect_keys.sort();
        effect_keys.dedup();
        assert_eq!(effect_keys.len(), claimed.len());

        // Each claimed row finishes under its own lease.
        for won in claimed {
            let key = won.key().clone();
            let finished = won
                .finish(
                    &db.pool,
                    |effect: Effect<TenantTransfer, TenantKey>| async move {
                        TenantTransfer::confirm(format!("ref-{}", effect.key().0)).into()
                    },
                )
                .await
                .unwrap();
            assert!(
                matches!(
                    finished,
                    Finished::Done {
                        state: TenantTransfer::Sent,
                        ..
                    }
                ),
                "{finished:?} {key:?}"
            );
        }
    }

    async fn pages_of_composite_keys_skip_and_repeat_nothing(db: Db<DB>) {
        tenants(&db).await;
        // A tenant whose name holds the key text's separator and escape.
        let insert = match DB::DIALECT {
            stateguard::ddl::Dialect::Postgres => {
                "INSERT INTO tenant_transfers (tenant_id, id) VALUES ($1, $2)"
            }
            _ => "INSERT INTO tenant_transfers (tenant_id, id) VALUES (?, ?)",
        };
        for id in 1..=50 {
            let binds = [common::Bind::Text("a/b%"), common::Bind::Int(id)];
            db.execute(insert, &binds).await.unwrap();
        }
        // Every pending row once, across the pages, whatever the order of
        // the tenants' names in the database's collation.
        let pending = TenantTransfer::Pending;
        let first = TenantTransfer::MACHINE
            .rows::<_, TenantKey>(&db.pool, pending, None)
            .await
            .unwrap();
        assert_eq!((first.rows.len(), first.more), (50, true));
        let last = first.rows.last().unwrap().key.clone();
        let second = TenantTransfer::MACHINE
            .rows(&db.pool, pending, Some(last))
            .await
            .unwrap();
        assert_eq!((second.rows.len(), second.more), (4, false));
        let mut seen: Vec<TenantKey> = (first.rows.into_iter())
            .chain(second.rows)
            .map(|row| row.key)
            .collect();
        seen.sort();
        let mut all: Vec<TenantKey> = (1..=50).map(|id| key("a/b%", id)).collect();
        all.extend([
            key("acme", 1),
            key("acme", 2),
            key("globex", 1),
            key("globex", 3),
        ]);
        all.sort();
        assert_eq!(seen, all);

        // The console reads the key back from its text in the URL.
        let text = stateguard::bounds::KeyText::key_text(&key("a/b%", 7));
        assert_eq!(text, "a%2Fb%25/7");
        let router = axum::Router::new().nest(
            "/ops",
            Console::new(db.pool.clone())
                .machine::<TenantTransfer, TenantKey>()
                .router(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, router).await });
        let url = format!("http://{address}/ops/TenantTransfer/rows/a%252Fb%2525%2F7");
        let response = reqwest::get(url).await.unwrap();
        assert_eq!(response.status(), 200);
        let page = response.text().await.unwrap();
        assert!(page.contains("<code>a%2Fb%25/7</code>"), "{page}");
        assert!(page.contains("data-state=\"pending\""), "{page}");
        // A key of one part is no key of this machine: 400, and why.
        let url = format!("http://{address}/ops/TenantTransfer/rows/7");
        let response = reqwest::get(url).await.unwrap();
        assert_eq!(response.status(), 400);
        let page = response.text().await.unwrap();
        assert!(page.contains("not a key of 2 values"), "{page}");
        // The state's page links each row by its key's text, escaped.
        let url = format!("http://{address}/ops/TenantTransfer/states/pending");
        let page = reqwest::get(url).await.unwrap().text().await.unwrap();
        assert!(
            page.contains("href=\"/ops/TenantTransfer/rows/a%252Fb%2525%2F7\""),
            "{page}"
        );
        server.abort();
    }
}

/// The bank reference stored with one tenant transfer.
async fn bank_ref<DB: TestBackend>(db: &Db<DB>, tenant: &str) -> Option<String> {
    let mut conn = db.pool.acquire().await.unwrap();
    let sql = match tenant {
        "acme" => "SELECT bank_ref FROM tenant_transfers WHERE tenant_id = 'acme' AND id = 1",
        _ => "SELECT bank_ref FROM tenant_transfers WHERE tenant_id = 'globex' AND id = 1",
    };
    let (bank_ref,): (Option<String>,) = DB::fetch_one(&mut conn, sql, &[]).await.unwrap();
    bank_ref
}

#[test]
fn every_key_column_is_matched_and_numbered_first() {
    let sql = TenantTransfer::cancel(0)
        .transition()
        .def()
        .update_expecting_sql()
        .unwrap();
    let tag = common::tag_column(&sql.statements()[0]);
    assert_eq!(
        sql.postgres(),
        format!(
            r#"UPDATE "tenant_transfers" SET "status" = 'cancelled', "version" = COALESCE("version", 0) + 1 WHERE "tenant_id" = $1 AND CAST("tenant_id" AS TEXT) COLLATE "C" = CAST($1 AS TEXT) AND "id" = $2 AND CAST("id" AS TEXT) COLLATE "C" = CAST($2 AS TEXT) AND "status" IN ('pending') AND (id >= $3) AND COALESCE("version", 0) = $4 RETURNING {tag}, CAST(COALESCE("version", 0) AS BIGINT)"#
        )
    );
    assert_eq!(TenantTransfer::MACHINE.key(), "tenant_id, id");
    assert_eq!(TenantTransfer::MACHINE.key_columns(), ["tenant_id", "id"]);
    let expired = TenantTransfer::MACHINE
        .state(TenantTransfer::Sending)
        .and_then(|s| s.in_flight())
        .unwrap()
        .expired_sql();
    assert!(
        expired
            .mysql()
            .starts_with("SELECT `tenant_id`, `id`, CAST(COALESCE(`version`, 0) AS SIGNED) FROM"),
        "{}",
        expired.mysql()
    );
}
