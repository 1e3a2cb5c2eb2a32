#![allow(dead_code)]

pub mod bench;
pub mod cluster;
pub mod e2e;
pub mod helm;
pub mod https;
pub mod injector;
pub mod kubelet;
pub mod kyverno;
pub mod otelcol;
pub mod prometheus;
