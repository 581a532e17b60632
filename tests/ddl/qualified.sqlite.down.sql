-- Removes what stateguard::ddl::sqlite::<QualifiedStatus>() created on sg_ddl_qualified.payouts.status.

DROP TRIGGER IF EXISTS "sg_ddl_qualified"."payouts_status_transitions";

DROP TRIGGER IF EXISTS "sg_ddl_qualified"."payouts_status_states_update";

DROP TRIGGER IF EXISTS "sg_ddl_qualified"."payouts_status_states_insert";
