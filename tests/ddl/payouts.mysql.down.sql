-- Removes what stateguard::ddl::mysql::<PayoutStatus>() created on payouts.status.

DROP TRIGGER IF EXISTS `payouts_status_transitions`;

ALTER TABLE `payouts` DROP CONSTRAINT `payouts_status_states`;
