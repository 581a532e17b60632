-- Removes what stateguard::ddl::mysql::<AccentStatus>() created on labels.status.

DROP TRIGGER IF EXISTS `labels_status_transitions`;

ALTER TABLE `labels` DROP CONSTRAINT `labels_status_states`;
