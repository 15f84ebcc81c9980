//! The store's labels of devices and driver builds (`clshim_format::labels`): the small
//! text files the library leaves beside a request and the warm worker beside an entry, so
//! that `clshim store` names a device and a driver build in words, where entries and
//! requests carry only their 64-bit ids. A label that exists is kept (its id says it is
//! the same device or build), and a process leaves each pair of labels once: the first
//! request of a device costs a few file operations more, the others none.
// On macOS the store is not used: what only it uses is idle.
#![cfg_attr(target_os = "macos", allow(dead_code))]

use super::files::{self, Fd};
use crate::cl::cl_device_id;
use crate::devices::DeviceFacts;
use clshim_format::labels::{self as format, DeviceLabel, DriverLabel};
use std::sync::atomic::{AtomicU64, Ordering};

/// The labels of one device and driver build.
#[derive(Debug)]
pub struct Labels {
    fingerprint: u64,
    driver: u64,
    device: DeviceLabel,
    /// None where the driver library cannot be named.
    driver_label: Option<DriverLabel>,
}

#[allow(clippy::declare_interior_mutable_const)] // only to fill the table below
const FREE: AtomicU64 = AtomicU64::new(0);
/// The (device, driver) pairs this process left labels of, as nonzero tags; a full table
/// only costs the existence checks again.
static LEFT: [AtomicU64; 16] = [FREE; 16];

fn tag(fingerprint: u64, driver: u64) -> u64 {
    (fingerprint ^ driver.rotate_left(32)) | 1
}

fn left_already(fingerprint: u64, driver: u64) -> bool {
    let t = tag(fingerprint, driver);
    LEFT.iter().any(|s| s.load(Ordering::Relaxed) == t)
}

fn remember(fingerprint: u64, driver: u64) {
    let t = tag(fingerprint, driver);
    for slot in &LEFT {
        match slot.compare_exchange(0, t, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(held) if held == t => return,
            Err(_) => {}
        }
    }
}

/// The labels of `device` (whose facts are `facts`, fingerprint `fingerprint`, driver
/// build `driver`), or None when this process left them already.
///
/// # Safety
/// `device` is a live device.
pub unsafe fn of(
    facts: &DeviceFacts,
    device: cl_device_id,
    fingerprint: u64,
    driver: u64,
) -> Option<Labels> {
    if left_already(fingerprint, driver) {
        return None;
    }
    Some(Labels {
        fingerprint,
        driver,
        device: DeviceLabel {
            name: facts.name.clone(),
            kind: crate::cl::device_type_name(facts.device_type).to_string(),
            platform: facts.platform.clone(),
            platform_version: facts.platform_version.clone(),
            device_version: facts.version.clone(),
            driver_version: facts.driver.clone(),
        },
        // SAFETY: a live device (this function's contract).
        driver_label: unsafe { super::driver::describe(device) },
    })
}

/// Writes `labels` in the store `store` (`devices/`, `drivers/`), keeping labels that
/// exist. A label that cannot be written costs nothing but itself.
pub fn leave(store: &Fd, labels: &Labels) {
    let device = (
        format::DEVICES,
        format::device_label_name(labels.fingerprint),
        labels.device.encode(labels.fingerprint),
    );
    let driver = labels.driver_label.as_ref().map(|d| {
        (
            format::DRIVERS,
            format::driver_label_name(labels.driver),
            d.encode(labels.driver),
        )
    });
    for (folder, name, text) in std::iter::once(device).chain(driver) {
        if let Ok(dir) = files::open_sub(store, folder, true) {
            let _ = files::write_atomic(&dir, &name, text.as_bytes(), false, false);
        }
    }
    remember(labels.fingerprint, labels.driver);
}

/// The warm worker's call: leaves the labels of `device` (with `facts`, driver build
/// `driver`) in the store `store`, unless this process did already.
///
/// # Safety
/// `device` is a live device.
pub unsafe fn leave_of(store: &Fd, facts: &DeviceFacts, device: cl_device_id, driver: u64) {
    // SAFETY: a live device (this function's contract).
    if let Some(l) = unsafe { of(facts, device, facts.fingerprint(), driver) } {
        leave(store, &l);
    }
}
