//! Child processes: user and process ids, signals to send and to receive when the parent
//! dies, reaping.
