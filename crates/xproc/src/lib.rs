//! ember's cross-process fusion (`../shared/spec/crossproc.md`): the parts that live in
//! shared memory between two processes under `ember run`.

pub mod registry;
