//! `available`: a row's state and occurrence, and each transition its
//! state allows with its guard told against the row, in one read; and the
//! pair it makes with `expecting`, which refuses a move chosen from an
//! answer the row has since left behind.

use crate::common;
use crate::common::KeyColumn;

use std::marker::PhantomData;

use common::{Db, TestBackend};
use stateguard::bounds::Key;
use stateguard::{GuardNow, Outcome, StateMachine, Tx};

/// An order: shipped once paid in full, held while risky, approved by
/// someone other than who asked.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "orders", column = "status", key = "id", version = "version")]
enum Order {
    #[state(initial)]
    #[transition(ship -> Shipped, guard = "paid_cents >= total_cents")]
    #[transition(cancel -> Cancelled)]
    #[transition(approve -> Approved, guard("requested_by <> :approver", approver = bind(String)))]
    #[transition(hold -> Held, guard = "risk > 50")]
    Open,
    #[transition(release -> Open, guard = "risk <= 50")]
    Held,
    #[transition(ship -> Shipped, guard = "paid_cents >= total_cents")]
    Approved,
    Shipped,
    Cancelled,
}

backend_tests! {
    impl Tests {
        "available" => each_choice_is_told_against_the_row,
        "available_stale" => a_move_chosen_from_a_stale_answer_is_refused,
    }
}

async fn orders<DB: TestBackend>(db: &Db<DB>) {
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in [
        "CREATE TABLE orders (
            id BIGINT PRIMARY KEY,
            status VARCHAR(32) NOT NULL,
            version BIGINT NOT NULL DEFAULT 0,
            paid_cents BIGINT NOT NULL DEFAULT 0,
            total_cents BIGINT NOT NULL DEFAULT 0,
            risk BIGINT,
            requested_by VARCHAR(64)
        )",
        "INSERT INTO orders (id, status, paid_cents, total_cents, risk, requested_by) VALUES
            (1, 'open', 100, 100, 10, 'ann'),
            (2, 'open', 50, 100, NULL, 'ann'),
            (3, 'held', 0, 100, 80, 'bob'),
            (4, 'shipped', 100, 100, 0, 'bob')",
    ] {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
}

pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend> Tests<DB>
where
    i64: KeyColumn<DB>,
    String: Key<DB>,
{
    async fn each_choice_is_told_against_the_row(db: Db<DB>) {
        orders(&db).await;
        let guards = |available: &stateguard::Available<Order>| -> Vec<(&'static str, GuardNow)> {
            available
                .choices()
                .iter()
                .map(|c| (c.name(), c.guard()))
                .collect()
        };
        // Paid in full, low risk: `ship` passes, `hold` fails, `approve`
        // needs its value, `cancel` has no guard.
        let one = Order::available(&db.pool, 1_i64).await.unwrap().unwrap();
        assert_eq!((one.state(), one.occurrence()), (Order::Open, 0));
        assert_eq!(
            guards(&one),
            [
                ("ship", GuardNow::Passes),
                ("cancel", GuardNow::Unguarded),
                ("approve", GuardNow::NeedsValues),
                ("hold", GuardNow::Fails),
            ]
        );
        assert_eq!(one.allowed().collect::<Vec<_>>(), ["ship", "cancel"]);
        assert_eq!(one.choice("ship").unwrap().target(), Order::Shipped);
        assert!(one.choice("release").is_none(), "not from `open`");
        // Half paid, no risk recorded: a NULL condition does not pass.
        let two = Order::available(&db.pool, 2_i64).await.unwrap().unwrap();
        assert_eq!(
            guards(&two),
            [
                ("ship", GuardNow::Fails),
                ("cancel", GuardNow::Unguarded),
                ("approve", GuardNow::NeedsValues),
                ("hold", GuardNow::Fails),
            ]
        );
        // Held and still risky: its one way out fails.
        let three = Order::available(&db.pool, 3_i64).await.unwrap().unwrap();
        assert_eq!(guards(&three), [("release", GuardNow::Fails)]);
        // Shipped: nothing leaves it.
        let four = Order::available(&db.pool, 4_i64).await.unwrap().unwrap();
        assert_eq!(four.state(), Order::Shipped);
        assert!(four.choices().is_empty());
        assert!(Order::available(&db.pool, 99_i64).await.unwrap().is_none());

        // The answer agrees with the moves themselves.
        assert!(matches!(
            Order::ship().apply(&db.pool, 2_i64).await.unwrap(),
            Outcome::Refused { .. }
        ));
        assert!(
            Order::ship()
                .apply(&db.pool, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );

        // Inside a transaction, it sees the transaction's own move.
        let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
        assert!(
            Order::cancel()
                .apply(&mut tx, 2_i64)
                .await
                .unwrap()
                .is_applied()
        );
        let moved = Order::available(&mut tx, 2_i64).await.unwrap().unwrap();
        assert_eq!((moved.state(), moved.occurrence()), (Order::Cancelled, 1));
        tx.rollback().await.unwrap();
        let back = Order::available(&db.pool, 2_i64).await.unwrap().unwrap();
        assert_eq!(back.state(), Order::Open);
    }

    async fn a_move_chosen_from_a_stale_answer_is_refused(db: Db<DB>) {
        orders(&db).await;
        // A page shows order 1 with its buttons...
        let shown = Order::available(&db.pool, 1_i64).await.unwrap().unwrap();
        assert!(shown.choice("ship").unwrap().allowed());
        // ...someone cancels it meanwhile...
        assert!(
            Order::cancel()
                .apply(&db.pool, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        // ...and the button pressed on the old page moves nothing.
        let pressed = Order::ship()
            .expecting(shown.occurrence())
            .apply(&db.pool, 1_i64)
            .await
            .unwrap();
        assert!(matches!(pressed, Outcome::Stale { .. }), "{pressed:?}");
        let now = Order::available(&db.pool, 1_i64).await.unwrap().unwrap();
        assert_eq!((now.state(), now.occurrence()), (Order::Cancelled, 1));
        assert!(now.choices().is_empty());
    }
}
