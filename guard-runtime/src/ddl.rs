//! Database-level enforcement generated from a machine: a CHECK constraint
//! on the status column and a trigger that rejects illegal transitions.
