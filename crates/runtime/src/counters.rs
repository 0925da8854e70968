//! The runtime's counter tables: a `u64` field per counter with its kstat name beside
//! it, as the core's `mib!` declares the MIB groups (`ember_core::host::stats`).

/// Declares a table of `u64` counters: the struct, its sum (`+=`), and its kstat
/// `(module:name, value)` pairs in table order. A field with no name is kept and
/// summed but not exported under a name of its own (it is folded into another
/// module's counter, as `Stack::stats` does with the loopback IP counts).
macro_rules! counters {
    ($(#[$doc:meta])* $name:ident {
        $( $(#[$fdoc:meta])* $field:ident $(=> $kname:literal)?, )*
    }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $name { $( $(#[$fdoc])* pub $field: u64, )* }

        impl core::ops::AddAssign for $name {
            fn add_assign(&mut self, o: $name) {
                $( self.$field += o.$field; )*
            }
        }

        impl $name {
            /// `(module:name, value)` pairs of its named counters, in table order.
            pub fn kstat(&self) -> Vec<(&'static str, u64)> {
                vec![ $( $( ($kname, self.$field), )? )* ]
            }
        }
    };
}
