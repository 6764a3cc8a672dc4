package pgsync

// Internals the external tests (package pgsync_test) reach.

// LockKey is lockKey: the first key of a node's advisory locks.
var LockKey = lockKey

// Migrations are the schema's migrations, in order.
var Migrations = migrations

// ReasonOf is reasonOf.
var ReasonOf = reasonOf

// PartToken is partToken.
var PartToken = partToken

// MigrateLock is migrateLock: the advisory lock a migration holds.
const MigrateLock = migrateLock
