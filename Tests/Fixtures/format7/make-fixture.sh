#!/bin/bash
# Builds the format-7 fixture vault (vault format 7, store schema 5: the change log, before format 8
# added the sync tables) with the CLI and the Secret Service provider of today's code:
# ./make-fixture.sh BIN OUT
set -euo pipefail
BIN=$1; OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$OUT"; mkdir -p "$OUT/state" "$OUT/data" "$OUT/home" "$OUT/run"
export HOME=$OUT/home XDG_STATE_HOME=$OUT/state XDG_DATA_HOME=$OUT/data XDG_RUNTIME_DIR=$OUT/run
V=$OUT/format7.vault
printf '%s\n' 'fixture passphrase: format 7' > $OUT/pass
P="--vault $V --passphrase-file $OUT/pass"
$BIN init --kdf interactive $P
$BIN access-group add team /usr/bin/dd /usr/bin/cat $P
# Generic passwords: several services, two of them with several accounts, one service with an
# item in each access group, one item needing user presence, one synchronizable
printf 'github alice' | $BIN add-generic-password $P -s github.com -a alice -l "GitHub token"
printf 'github bob' | $BIN add-generic-password $P -s github.com -a bob
printf 'github carol' | $BIN add-generic-password $P -s github.com -a carol --synchronizable
printf 'team secret' | $BIN add-generic-password $P -s deploy -a ci --access-group team
printf 'shared default' | $BIN add-generic-password $P -s shared -a alice
printf 'shared team' | $BIN add-generic-password $P -s shared -a bob --access-group team
printf 'presence secret' | $BIN add-generic-password $P -s bank -a me --access-control userPresence
printf 'slash secret' | $BIN add-generic-password $P -s 'odd/service name' -a 'with space'
# Internet passwords: two on one server (other ports and protocols), one in team
printf 'inet secret' | $BIN add-internet-password $P -s example.com -a carol -r https -P 8443 -p /login -l "Example login"
printf 'inet secret 2' | $BIN add-internet-password $P -s example.com -a erin -r https -P 8443
printf 'ftp secret' | $BIN add-internet-password $P -s ftp.example.org -a dave -r ftp
printf 'sync inet' | $BIN add-internet-password $P -s sync.example.com -a sam -r https --synchronizable
printf 'device only' | $BIN add-generic-password $P -s github.com -a dora --accessible whenUnlockedThisDeviceOnly
printf 'team inet' | $BIN add-internet-password $P -s db.example.net -a ops -r https --access-group team
# A certificate and a key pair (the key is not extractable)
$BIN add-certificates $P -l "Fixture CA" "$HERE/ca.crt"
$BIN create-keypair $P -l "fixture-ed25519" > $OUT/keypair.pub
# An update and a delete through the CLI, so versions and the id sequence are not trivial
printf 'github bob v2' | $BIN add-generic-password $P -s github.com -a bob -U
printf 'doomed' | $BIN add-generic-password $P -s github.com -a doomed
$BIN delete-generic-password $P -s github.com -a doomed
# Secret Service items (the attribute index), stored with secret-tool through the provider on
# a private session bus
dbus-daemon --session --nofork --nopidfile --print-address=1 --address=unix:path=$OUT/run/bus > $OUT/run/address &
BUS=$!
for _ in $(seq 50); do [ -s $OUT/run/address ] && break; sleep 0.1; done
export DBUS_SESSION_BUS_ADDRESS=unix:path=$OUT/run/bus
$BIN secret-service $P --address $DBUS_SESSION_BUS_ADDRESS > $OUT/run/provider.log 2>&1 &
PROVIDER=$!
for _ in $(seq 100); do grep -q 'serving org.freedesktop.secrets' $OUT/run/provider.log && break; sleep 0.1; done
printf 'mail secret' | secret-tool store --label='Mail' service mail.example.org username mia
printf 'git secret' | secret-tool store --label='Git: https://git.example.com' xdg:schema org.git.Password \
    protocol https host git.example.com user gus
printf 'app secret' | secret-tool store --label='App token' application fixture-app project alpha color blue
printf 'app secret 2' | secret-tool store --label='App token 2' application fixture-app project beta color blue
kill $PROVIDER; wait $PROVIDER || true
kill $BUS; wait $BUS || true
$BIN dump-keychain --json $P > $OUT/dump.json
$BIN access-group list $P > $OUT/access-groups.txt
# one self-contained file: the WAL folded into the vault
sqlite3 $V 'PRAGMA wal_checkpoint(TRUNCATE);' > /dev/null
rm -f $V-wal $V-shm
cp $OUT/state/keychainfs/device.key $OUT/device.key
cp $OUT/pass $OUT/passphrase
