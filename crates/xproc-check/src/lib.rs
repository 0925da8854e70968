//! Scenarios for `ember run`: each runs with and without the preload library.
