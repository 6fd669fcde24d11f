//! The calling thread's properties: its name and its signal mask.
