-- Removes what stateguard::ddl::postgres::<PayoutStatus>() created on payouts.status.

DROP TRIGGER IF EXISTS "payouts_status_transitions" ON "payouts";

DROP FUNCTION IF EXISTS "payouts_status_transitions"();

ALTER TABLE "payouts" DROP CONSTRAINT IF EXISTS "payouts_status_states";
