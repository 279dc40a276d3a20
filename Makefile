# keychainfs: build, install, uninstall (README.md, "Install it").
#
#   make                      build the release binary
#   sudo make install         install under PREFIX (default /usr/local) and the mount helper in /sbin
#   make install PREFIX=~/.local MOUNT_HELPER_DIR=   a per-user install, without the mount helper
#   make install DESTDIR=/tmp/stage                  stage for a package
#   sudo make uninstall       remove exactly what install installed (same variables)
#   make man                  regenerate docs/man/keychainfs.1 from the argument parser
#
# `install` builds first; `install-files` installs an already built BIN (no build, no SwiftPM
# lock: the tests use it with the debug binary).

PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
# mount(8) looks for mount.<type> in /sbin, /sbin/fs.d and /sbin/fs only, whatever PREFIX is.
# Empty: no mount helper (a per-user install cannot write /sbin).
MOUNT_HELPER_DIR ?= /sbin
# Where systemd's user manager looks (systemd-analyze --user unit-paths): $XDG_DATA_HOME/systemd/user
# for PREFIX=~/.local, /usr/local/share/systemd/user and /usr/share/systemd/user system-wide.
SYSTEMD_USER_DIR ?= $(DATADIR)/systemd/user
# The Secret Service's D-Bus activation file. Empty (DBUS_SERVICES_DIR=) installs none: a machine
# with gnome-keyring has one for the same name, and the bus would pick either.
DBUS_SERVICES_DIR ?= $(DATADIR)/dbus-1/services
BASH_COMPLETION_DIR ?= $(DATADIR)/bash-completion/completions
ZSH_COMPLETION_DIR ?= $(DATADIR)/zsh/site-functions
FISH_COMPLETION_DIR ?= $(DATADIR)/fish/vendor_completions.d

SWIFT ?= swift
CONFIGURATION ?= release
# One self-contained binary: the Swift runtime linked in (only Debian's libraries at run time,
# nothing found through a RUNPATH into the toolchain), stripped when installed (STRIP= keeps
# the symbols).
# No RUNPATH either (--disable-local-rpath; SwiftPM adds $$ORIGIN otherwise): the binary's and
# libpq's libraries (libpq is loaded when sync first connects) come from the system's library
# path only, never from a file beside the installed binary.
SWIFT_BUILD_FLAGS ?= $(if $(filter release,$(CONFIGURATION)),--static-swift-stdlib --disable-local-rpath)
STRIP ?= -s
BIN ?= .build/$(CONFIGURATION)/keychainfs
# git's and docker's credential helpers: hard links to keychainfs, which runs each by the name
# it was started as (`git config credential.helper keychainfs` runs git-credential-keychainfs
# from PATH; docker's credsStore likewise). Hard, not symbolic: access groups name a caller by
# /proc/PID/exe, which a symlink would resolve to keychainfs.
HELPERS = git-credential-keychainfs docker-credential-keychainfs

# The one keychain service and the sockets that start it (docs/service.md).
UNITS = keychainfs.service keychainfs.socket keychainfs-ssh-agent.socket
# With the D-Bus activation file installed, the service also serves the Secret Service (the
# file's SystemdService= starts it for org.freedesktop.secrets).
SERVICE_OPTIONS = $(if $(DBUS_SERVICES_DIR), -o secret_service)
# Units earlier versions installed, each its own process: uninstall removes them too.
OBSOLETE = $(SYSTEMD_USER_DIR)/keychainfs-ssh-agent.service $(SYSTEMD_USER_DIR)/keychainfs-secret-service.service \
	$(PREFIX)/lib/systemd/user/keychainfs.service $(PREFIX)/lib/systemd/user/keychainfs-ssh-agent.service \
	$(PREFIX)/lib/systemd/user/keychainfs-secret-service.service

# Every file install-files writes, for uninstall.
INSTALLED = $(BINDIR)/keychainfs $(addprefix $(BINDIR)/,$(HELPERS)) $(MANDIR)/man1/keychainfs.1 $(MANDIR)/man5/keychainfs.5 \
	$(addprefix $(MANDIR)/man1/,$(addsuffix .1,$(HELPERS))) \
	$(BASH_COMPLETION_DIR)/keychainfs $(ZSH_COMPLETION_DIR)/_keychainfs \
	$(FISH_COMPLETION_DIR)/keychainfs.fish $(addprefix $(SYSTEMD_USER_DIR)/,$(UNITS)) \
	$(if $(DBUS_SERVICES_DIR),$(DBUS_SERVICES_DIR)/org.freedesktop.secrets.service) \
	$(if $(MOUNT_HELPER_DIR),$(MOUNT_HELPER_DIR)/mount.keychainfs)

.PHONY: all build install install-files uninstall man

all: build

build:
	$(SWIFT) build -c $(CONFIGURATION) $(SWIFT_BUILD_FLAGS) --product keychainfs

install: build
	$(MAKE) install-files

# The installed helper and unit name the installed binary, not /usr/local/bin's.
install-files:
	@test -x "$(BIN)" || { echo "make: $(BIN) is not built; run 'make' first" >&2; exit 1; }
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(MANDIR)/man1" "$(DESTDIR)$(MANDIR)/man5" \
		"$(DESTDIR)$(BASH_COMPLETION_DIR)" "$(DESTDIR)$(ZSH_COMPLETION_DIR)" "$(DESTDIR)$(FISH_COMPLETION_DIR)" \
		"$(DESTDIR)$(SYSTEMD_USER_DIR)"
	install -m 0755 $(STRIP) "$(BIN)" "$(DESTDIR)$(BINDIR)/keychainfs"
	for helper in $(HELPERS); do ln -f "$(DESTDIR)$(BINDIR)/keychainfs" "$(DESTDIR)$(BINDIR)/$$helper" || exit 1; done
	install -m 0644 docs/man/keychainfs.1 "$(DESTDIR)$(MANDIR)/man1/keychainfs.1"
	install -m 0644 docs/man/keychainfs.5 "$(DESTDIR)$(MANDIR)/man5/keychainfs.5"
	for helper in $(HELPERS); do install -m 0644 "docs/man/$$helper.1" "$(DESTDIR)$(MANDIR)/man1/$$helper.1" || exit 1; done
	"$(BIN)" --generate-completion-script bash > "$(DESTDIR)$(BASH_COMPLETION_DIR)/keychainfs"
	"$(BIN)" --generate-completion-script zsh > "$(DESTDIR)$(ZSH_COMPLETION_DIR)/_keychainfs"
	"$(BIN)" --generate-completion-script fish > "$(DESTDIR)$(FISH_COMPLETION_DIR)/keychainfs.fish"
	for unit in $(UNITS); do \
		sed -e 's|/usr/local/bin/keychainfs|$(BINDIR)/keychainfs|g' -e 's|@SERVICE_OPTIONS@|$(SERVICE_OPTIONS)|' \
			"mount-helper/$$unit" > "$(DESTDIR)$(SYSTEMD_USER_DIR)/$$unit" || exit 1; \
		chmod 0644 "$(DESTDIR)$(SYSTEMD_USER_DIR)/$$unit"; \
	done
ifneq ($(DBUS_SERVICES_DIR),)
	install -d "$(DESTDIR)$(DBUS_SERVICES_DIR)"
	sed 's|/usr/local/bin/keychainfs|$(BINDIR)/keychainfs|g' mount-helper/org.freedesktop.secrets.service \
		> "$(DESTDIR)$(DBUS_SERVICES_DIR)/org.freedesktop.secrets.service"
	chmod 0644 "$(DESTDIR)$(DBUS_SERVICES_DIR)/org.freedesktop.secrets.service"
endif
ifneq ($(MOUNT_HELPER_DIR),)
	install -d "$(DESTDIR)$(MOUNT_HELPER_DIR)"
	sed 's|/usr/local/bin/keychainfs|$(BINDIR)/keychainfs|g' mount-helper/mount.keychainfs \
		> "$(DESTDIR)$(MOUNT_HELPER_DIR)/mount.keychainfs"
	chmod 0755 "$(DESTDIR)$(MOUNT_HELPER_DIR)/mount.keychainfs"
endif

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED) $(OBSOLETE))

# ArgumentParser's GenerateManual plugin (debug: the test build is already there).
# The generated page ends with a generic EXIT STATUS: it is replaced by the hand-written
# ENVIRONMENT, FILES, EXIT STATUS and SEE ALSO of docs/man/keychainfs.1.sections.
man:
	$(SWIFT) package plugin generate-manual --configuration debug
	sed '/^\.Sh "EXIT STATUS"/,$$d' .build/plugins/GenerateManual/outputs/keychainfs/keychainfs.1 \
		| cat - docs/man/keychainfs.1.sections > docs/man/keychainfs.1
