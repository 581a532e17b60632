-- Removes what stateguard::ddl::sqlite::<PayoutStatus>() created on payouts.status.

DROP TRIGGER IF EXISTS "payouts_status_transitions";

DROP TRIGGER IF EXISTS "payouts_status_states_update";

DROP TRIGGER IF EXISTS "payouts_status_states_insert";
