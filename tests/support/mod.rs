#![allow(dead_code)]

pub mod cluster;
pub mod https;
pub mod injector;
pub mod kubelet;
