#!/bin/bash
# Builds the format-3 fixture vault (vault format 3, store schema 2, with the attribute index) with
# the CLI and the Secret Service provider of today's code: ./make-fixture.sh BIN OUT
set -euo pipefail
BIN=$1; OUT=$2
rm -rf "$OUT"; mkdir -p "$OUT/state" "$OUT/data" "$OUT/home" "$OUT/run"
export HOME=$OUT/home XDG_STATE_HOME=$OUT/state XDG_DATA_HOME=$OUT/data XDG_RUNTIME_DIR=$OUT/run
V=$OUT/format3.vault
printf '%s\n' 'fixture passphrase: format 3' > $OUT/pass
P="--vault $V --passphrase-file $OUT/pass"
$BIN init --kdf interactive $P
$BIN access-group add team /usr/bin/dd /usr/bin/cat $P
# CLI-made items: genp and inet, one in another access group, one needing user presence
printf 'github secret' | $BIN add-generic-password $P -s github.com -a alice -l "GitHub token"
printf 'team secret' | $BIN add-generic-password $P -s deploy -a ci --access-group team
printf 'presence secret' | $BIN add-generic-password $P -s bank -a me --access-control userPresence
printf 'inet secret' | $BIN add-internet-password $P -s example.com -a carol -r https -P 8443 -p /login -l "Example login"
printf 'ftp secret' | $BIN add-internet-password $P -s ftp.example.org -a dave -r ftp
# Secret Service items (they keep their attribute map in secretServiceAttributes, code ssat),
# stored with secret-tool through the provider on a private session bus
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
printf 'custom secret' | secret-tool store --label='Custom' xdg:schema org.example.Custom tier gold region eu-west
printf 'docker secret' | secret-tool store --label='Docker' xdg:schema io.docker.Credentials \
    server https://registry.example.io/v2/ username dora
# an update and a delete, so versions and the id sequence are not trivial
printf 'mail secret v2' | secret-tool store --label='Mail' service mail.example.org username mia
printf 'doomed' | secret-tool store --label='Doomed' service doomed username x
secret-tool clear service doomed username x
kill $PROVIDER; wait $PROVIDER || true
kill $BUS; wait $BUS || true
$BIN dump-keychain --json $P > $OUT/dump.json
$BIN access-group list $P > $OUT/access-groups.txt
# one self-contained file: the WAL folded into the vault
sqlite3 $V 'PRAGMA wal_checkpoint(TRUNCATE);' > /dev/null
rm -f $V-wal $V-shm
cp $OUT/state/keychainfs/device.key $OUT/device.key
cp $OUT/pass $OUT/passphrase
