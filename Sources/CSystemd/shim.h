#ifndef KEYCHAINFS_CSYSTEMD_SHIM_H
#define KEYCHAINFS_CSYSTEMD_SHIM_H

#include <stdint.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>

// sd-bus's credential mask is an anonymous enum of 64-bit values, which Swift imports
// unreliably: the bits the Secret Service face asks for, as typed constants.
static const uint64_t keychainfs_creds_pid = SD_BUS_CREDS_PID;
static const uint64_t keychainfs_creds_pid_comm_exe = SD_BUS_CREDS_PID | SD_BUS_CREDS_COMM | SD_BUS_CREDS_EXE;

#endif
