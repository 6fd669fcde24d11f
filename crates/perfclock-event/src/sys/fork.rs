//! Forking: whether a fork child of this process can run, and what it must not touch.
