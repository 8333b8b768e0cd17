DROP TABLE IF EXISTS `watermill_inbox_locks`;
DROP TABLE IF EXISTS `watermill_inbox_produced`;
DROP TABLE IF EXISTS `watermill_inbox`;
