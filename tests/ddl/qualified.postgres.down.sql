-- Removes what stateguard::ddl::postgres::<QualifiedStatus>() created on sg_ddl_qualified.payouts.status.

DROP TRIGGER IF EXISTS "payouts_status_transitions" ON "sg_ddl_qualified"."payouts";

DROP FUNCTION IF EXISTS "sg_ddl_qualified"."payouts_status_transitions"();

ALTER TABLE "sg_ddl_qualified"."payouts" DROP CONSTRAINT IF EXISTS "payouts_status_states";
