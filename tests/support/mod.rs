#![allow(dead_code)]

pub mod https;
pub mod injector;
