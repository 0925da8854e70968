//! The `ember run` preload library.
