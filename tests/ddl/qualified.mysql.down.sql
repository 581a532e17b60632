-- Removes what stateguard::ddl::mysql::<QualifiedStatus>() created on sg_ddl_qualified.payouts.status.

DROP TRIGGER IF EXISTS `sg_ddl_qualified`.`payouts_status_transitions`;

ALTER TABLE `sg_ddl_qualified`.`payouts` DROP CONSTRAINT `payouts_status_states`;
