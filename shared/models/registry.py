"""The model registry: which versions are loaded, which one is active, and their lifecycle.

    vet → trial → load → validate → warm → (candidate →) activate → retire

It alone owns the name → versions map. A new file is vetted (`shared.models.vetting`) and
tried in a sandboxed child (`shared.models.sandbox`) before the serving process loads it;
it is then loaded, checked and warmed off the event loop, and activated by replacing one
reference; versions beyond `keep_versions` are retired (their queued requests finish) and
their sessions released. Re-installing a file already loaded (same fingerprint) changes nothing;
a different file under a version already loaded, one whose SHA-256 is not the digest
recorded at publish (`release.json`), or one that is not the digest the fleet's records name
(`vouch`: a pin, a newest-version record, a shadow or a canary), is refused.

Which version serves: the pinned one, else the newest promoted one, else (nothing promoted
yet) the oldest loaded. A new version is a candidate until it is promoted: by the control
plane's pin (shared/fleet/versions.py; a canary's promote pins), or on arrival when
`auto_promote` (AUTO_PROMOTE, local development only) is on. Nothing in the model source
makes a version live: a release record's `promoted` (an older format) is ignored.

A version whose run trips a bound at score time (its deadline or the memory cap:
shared/models/bounds.py) is quarantined at once: taken out, its session released, the last good
version active again, and never loaded again by this process; the `quarantined` hook lets the
fleet's records (shared/fleet/versions.py) quarantine it on every replica. Its events are rescored
by the version active after (`RunOverBudget` is a `BatcherClosed`: callers resubmit).

A version whose warm-up stays starved of CPU (`WarmupStarved`: the replica throttled at its CPU limit,
shared/models/onnx.py) is not rejected: nothing is recorded against its file, and the error goes to
the caller (retryable), so a later load of the same file tries again: the Blob trigger's redelivery,
a poll or record watch once STARVED_WAIT_S has passed (doubling while it stays starved), the next start
(`load_all` goes on to the other versions meanwhile).

Other parts follow the lifecycle through hooks (`on("activated", callback)`), not by
reaching in: the reload broadcast, telemetry and caches subscribe to what they need.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Literal

from shared.domain.answers import LoadError, ModelView
from shared.domain.feast_spec import FromServingFeast
from shared.errors import ModelInvalid, ModelNotFound, ModelSourceError, NotReady, RunOverBudget, WarmupStarved
from shared.models.onnx import OnnxModel
from shared.models.repository import ModelRef, ModelRepository, Release, check_ref, version_key
from shared.models.sandbox import Sandbox
from shared.models.served import LoadedModel
from shared.models.vetting import DEFAULT_POLICY, VettingPolicy
from shared.policies import BatchPolicy, OrtOptions
from shared.stores.cache.predictions import PredictionCache

__all__ = ["LoadError", "ModelRegistry", "RegistryEvent", "fingerprint"]

log = logging.getLogger(__name__)

EventKind = Literal["loaded", "activated", "retired", "failed", "quarantined"]
CANDIDATES_DEEP = 8  # at start, how many versions past keep_versions are tried for a promoted one
STARVED_WAIT_S = (15.0, 300.0)  # after a warm-up starved of CPU: the first wait before its next load, the longest


@dataclass(frozen=True, slots=True)
class RegistryEvent:
    """One step of a version's lifecycle, as hooks receive it."""

    kind: EventKind
    name: str
    version: str
    fingerprint: str = ""
    detail: str = ""


Hook = Callable[[RegistryEvent], None]


Catalogue = Callable[[], Awaitable[Collection[str] | None]]


def fingerprint(data: bytes) -> str:
    """A short hash of a model file: the same bytes are the same model."""
    return hashlib.blake2b(data, digest_size=6).hexdigest()


class ModelRegistry:
    """Loaded versions per model name; the newest version is the active one."""

    def __init__(
        self,
        repository: ModelRepository,
        ort_options: OrtOptions,
        policy: BatchPolicy,
        keep_versions: int = 2,
        predictions: PredictionCache | None = None,
        catalogue: Catalogue | None = None,
        *,
        sandbox: Sandbox | None = None,
        vetting: VettingPolicy = DEFAULT_POLICY,
        auto_promote: bool = True,
    ) -> None:
        self.repository = repository
        self._sandbox = sandbox
        self._vetting = vetting
        self.auto_promote = auto_promote
        self._promoted: dict[str, set[str]] = {}  # name -> versions that may serve unpinned
        self._digests: dict[ModelRef, str] = {}  # the SHA-256 each version was first loaded with
        self._vouched: dict[ModelRef, str] = {}  # the SHA-256 the fleet's records name for a version
        self._catalogue = catalogue
        self._predictions = predictions
        self._ort = ort_options
        self._policy = policy
        self._keep = keep_versions
        self._models: dict[str, dict[str, LoadedModel]] = {}
        self._active: dict[str, LoadedModel] = {}
        self._hooks: dict[EventKind, list[Hook]] = {
            k: [] for k in ("loaded", "activated", "retired", "failed", "quarantined")
        }
        self._quarantined: dict[ModelRef, str] = {}  # versions that tripped a bound here or elsewhere -> why
        self._starved: dict[ModelRef, tuple[float, float]] = {}  # starved at warm-up -> (not before, that wait)
        self._draining: set[asyncio.Task[None]] = set()
        self._lock: asyncio.Lock | None = None
        self.ready = False
        self._pins: dict[str, str] = {}  # name -> the version pinned to serve
        # name -> versions a shadow or canary names (shared/fleet/routes.py): kept loaded beyond
        # keep_versions while named; being held never makes a version the active one
        self._held: dict[str, set[str]] = {}
        self._last_error: dict[str, LoadError] = {}  # name -> the last version rejected

    # -- the state others read and set, through methods (shared/fleet keeps it fleet-wide) ------

    def pinned(self, name: str) -> str | None:
        """The version pinned to serve `name`, if any."""
        return self._pins.get(name)

    def set_pin(self, name: str, version: str | None) -> None:
        """Record the pin of `name` without activating anything (None: no pin): at start, before the
        first load, and before a pinned version is loaded (so it is kept beyond MODELS_KEEP_VERSIONS)."""
        if version is None:
            self._pins.pop(name, None)
        else:
            self._pins[name] = version

    def held(self, name: str) -> set[str]:
        """The versions of `name` a shadow or canary names: kept loaded beyond MODELS_KEEP_VERSIONS."""
        return self._held.get(name, set())

    def hold(self, name: str, versions: set[str]) -> None:
        """Keep `versions` of `name` loaded while a shadow or canary names them (empty: none); being held
        never makes a version the active one. `release_unheld` retires what is no longer held."""
        if versions:
            self._held[name] = set(versions)
        else:
            self._held.pop(name, None)

    def last_error(self, name: str) -> LoadError | None:
        """The last version of `name` this registry rejected, and why."""
        return self._last_error.get(name)

    def vouch(self, ref: ModelRef, sha256: str) -> None:
        """The fleet's records name `sha256` for `ref`: a file with another digest is refused here.

        `ModelInvalid` at once when the version is loaded with another digest (it keeps its place:
        the caller refuses to route to it or pin it). A record written before records named digests
        (`sha256` empty) vouches only for a version this process already serves (the file it loaded);
        for any other it is refused: it would let whatever file is under the version load.
        """
        if not sha256:
            if ref.version in self._models.get(ref.name, {}):
                return
            raise ModelInvalid(
                f"{ref.name}/{ref.version}: the fleet's record names no digest (written before records named "
                "them), and this replica does not serve that version: not followed until a record names the file"
            )
        self._vouched[ref] = sha256
        loaded = self._models.get(ref.name, {}).get(ref.version)
        if loaded is not None and loaded.digest != sha256:
            raise ModelInvalid(_not_vouched(ref, loaded.digest, sha256))

    def quarantined(self, name: str) -> dict[str, str]:
        """The quarantined versions of `name` and why (a bound they tripped, here or on another replica)."""
        return {ref.version: why for ref, why in self._quarantined.items() if ref.name == name}

    def quarantine(self, name: str, version: str, reason: str) -> bool:
        """Never serve `name/version` again in this process: taken out at once (the last good version
        active again), its session released, never loaded again. Whether it was new here."""
        ref = ModelRef(name, version)
        if ref in self._quarantined:
            return False
        self._quarantined[ref] = reason
        self._last_error[name] = LoadError(version, f"quarantined: {reason}", time.time(), "quarantined")
        log.error("model %s/%s quarantined: %s", name, version, reason)
        loaded = self._models.get(name, {}).pop(version, None)
        if loaded is not None:
            loaded.quarantined = loaded.quarantined or reason
            loaded.model.release()
            self._drain(loaded)
            self._reactivate(name)
            self._emit(RegistryEvent("retired", name, version, loaded.fingerprint))
        self._emit(RegistryEvent("quarantined", name, version, "" if loaded is None else loaded.digest, reason))
        return True

    def _reactivate(self, name: str) -> None:
        """The active version of `name` after one was taken out (none when nothing else is loaded)."""
        versions = self._models.get(name, {})
        previous = self._active.pop(name, None)
        if versions:
            self._active[name] = versions[self._chosen(name, versions)]
            if self._active[name] is not previous:
                active = self._active[name]
                self._emit(RegistryEvent("activated", name, active.version, active.fingerprint))

    def _drain(self, loaded: LoadedModel) -> None:
        """Stop a taken-out version's batcher: what it queued fails over to the active version."""
        try:
            task = asyncio.get_running_loop().create_task(loaded.retire())
        except RuntimeError:  # no loop (a synchronous caller): nothing can be queued either
            return
        self._draining.add(task)
        task.add_done_callback(self._draining.discard)

    def _over_budget(self, loaded: LoadedModel, exc: RunOverBudget) -> None:
        self.quarantine(loaded.name, loaded.version, exc.detail)

    def on(self, kind: EventKind, hook: Hook) -> None:
        """Call `hook` at each `kind` step. Hooks run on the event loop: hand slow work off."""
        self._hooks[kind].append(hook)

    async def load_all(self) -> None:
        """Load the newest `keep_versions` valid versions of every model in the source (and any pinned or held one)."""
        refs = await asyncio.to_thread(self.repository.list)
        if not refs:
            raise NotReady(f"no models found in the model source ({self.repository.setting})")
        by_name: dict[str, list[str]] = {}
        for ref in refs:
            by_name.setdefault(ref.name, []).append(ref.version)
        for name, versions in by_name.items():
            loaded = 0
            for tried, version in enumerate(sorted(versions, key=version_key, reverse=True)):  # newest first
                enough = self.auto_promote or self._promoted.get(name) or tried >= self._keep + CANDIDATES_DEEP
                if loaded >= self._keep and enough:
                    break  # with candidates, on (a bounded way) until a promoted version is loaded too
                if await self._load_at_start(ModelRef(name, version)):
                    loaded += 1  # NOTE: a bad file left in the source must not keep a new replica down
            pinned = self._pins.get(name)
            if pinned is not None and pinned in versions:
                await self._load_at_start(ModelRef(name, pinned))
            for held in sorted(self._held.get(name, set()) & set(versions), key=version_key):
                await self._load_at_start(ModelRef(name, held))
        if not self._active:
            raise NotReady(f"no valid model in the model source ({self.repository.setting})")
        self.ready = True

    async def _load_at_start(self, ref: ModelRef) -> LoadedModel | None:
        """`load`, where a warm-up starved of CPU only skips the version for now (the poll or the record
        watch loads it later; if nothing loads, the start fails NotReady and the next call starts again)."""
        try:
            return await self.load(ref)
        except WarmupStarved:
            return None  # logged by `install`

    async def load(self, ref: ModelRef) -> LoadedModel | None:
        """Read `ref` from the source and install it; None when the file is rejected (or was already).

        `WarmupStarved` (retryable) when its warm-up stayed starved of CPU: not a rejection, a later load
        tries it. Not at once: a starved replica is not given another trial of it for STARVED_WAIT_S,
        doubling while it stays starved (a trial is work, on a replica already short of CPU)."""
        if ref in self._quarantined:
            return None
        if (held := self._starved.get(ref)) is not None and (left := held[0] - time.monotonic()) > 0:
            raise WarmupStarved(
                f"{ref.name}/{ref.version} was starved of CPU at its warm-up: tried again in {left:.0f} s"
            )
        stamp = await asyncio.to_thread(self.repository.stamp, ref)
        if self.rejected(ref.name, ref.version, stamp):
            return None
        data = await asyncio.to_thread(self.repository.read, ref)
        try:
            loaded = await self.install(ref.name, ref.version, data, stamp=stamp)
        except ModelInvalid:
            return None
        except WarmupStarved:
            wait = min(2 * held[1], STARVED_WAIT_S[1]) if held is not None else STARVED_WAIT_S[0]
            self._starved[ref] = (time.monotonic() + wait, wait)
            raise
        self._starved.pop(ref, None)
        return loaded

    async def install(self, name: str, version: str, data: bytes, *, stamp: str = "") -> LoadedModel:
        """Load, validate and warm a version, then activate it if it is the newest (or pinned).

        A rejected file is remembered (`last_error`, with the source's `stamp` of the file) and
        logged once: the current version keeps serving. A warm-up starved of CPU (`WarmupStarved`) is
        raised and not remembered: the file is not at fault, and its next load tries again.
        """
        check_ref(name, version)
        if (why := self._quarantined.get(ModelRef(name, version))) is not None:
            raise ModelInvalid(f"{name}/{version} is quarantined: {why}")
        digest = fingerprint(data)
        current = self._models.get(name, {}).get(version)
        if current is not None and current.fingerprint == digest:
            return current  # the same file again (a redelivered event, a broadcast echo)
        ref = ModelRef(name, version)
        sha256 = hashlib.sha256(data).hexdigest()
        try:
            release = await self._release(ref)
            self._check_digest(ref, sha256, release)
            loaded = await asyncio.to_thread(self._load, name, version, data, digest)
            loaded.digest = sha256
            await self._validate(loaded)
        except ModelInvalid as exc:
            self._last_error[name] = LoadError(version, exc.detail, time.time(), stamp or digest)
            log.error("model %s/%s rejected: %s", name, version, exc.detail)
            self._emit(RegistryEvent("failed", name, version, digest, exc.detail))
            raise
        except WarmupStarved as exc:  # NOTE: the replica's CPU, not the file: nothing recorded, retried
            log.warning("model %s/%s not loaded now, to be tried again: %s", name, version, exc.detail)
            raise
        if self._last_error.get(name, LoadError("", "", 0.0, "")).version == version:
            del self._last_error[name]
        self._digests[ref] = sha256
        if self.auto_promote:  # NOTE: never from the release record: whoever writes the file writes it too
            self._promoted.setdefault(name, set()).add(version)
        self._emit(RegistryEvent("loaded", name, version, digest))
        await self._retire(await self._activate(loaded))
        return loaded

    async def _release(self, ref: ModelRef) -> Release | None:
        """The version's release record; None when it has none, or when the source cannot say now.

        NOTE: a Blob trigger hands the bytes in while the store may be down: the file is then
        taken as unrecorded (its digest still may not change, and it stays a candidate unless
        AUTO_PROMOTE), rather than refused while the current version serves on.
        """
        try:
            return await asyncio.to_thread(self.repository.release, ref)
        except ModelSourceError as exc:
            log.warning("%s/%s: release record unreadable (%s); taken as unrecorded", *ref, exc.detail)
            return None

    def _check_digest(self, ref: ModelRef, sha256: str, release: Release | None) -> None:
        """`ModelInvalid` when the file is not the one published (or first loaded) under its version."""
        seen = self._digests.get(ref)
        if seen is not None and seen != sha256:
            raise ModelInvalid(
                f"{ref.name}/{ref.version}: its file changed after it was loaded (sha256 {seen[:12]}… → "
                f"{sha256[:12]}…); a version's file never changes: publish a new version"
            )
        if release is not None and release.sha256 != sha256:
            raise ModelInvalid(
                f"{ref.name}/{ref.version}: the file's sha256 {sha256[:12]}… is not the digest recorded at "
                f"publish ({release.sha256[:12]}…)"
            )
        vouched = self._vouched.get(ref)
        if vouched is not None and vouched != sha256:
            raise ModelInvalid(_not_vouched(ref, sha256, vouched))

    async def promote(self, name: str, version: str) -> LoadedModel:
        """Let a loaded candidate serve (unless a pin holds another version); the active version after."""
        if version not in self._models.get(name, {}):
            raise ModelNotFound(f"model {name!r} has no loaded version {version!r}")
        self._promoted.setdefault(name, set()).add(version)
        await self._retire(await self._activate(self._models[name][version]))
        log.info("model %s/%s promoted", name, version)
        return self._active[name]

    def candidates(self, name: str) -> list[str]:
        """Loaded versions of `name` that wait for a promote (they serve only shadows and canaries)."""
        promoted = self._promoted.get(name, set())
        return [v for v in self.loaded_versions(name) if v not in promoted and v != self._pins.get(name)]

    def rejected(self, name: str, version: str, stamp: str) -> bool:
        """Whether this very file (same source stamp) was already rejected: not retried."""
        error = self._last_error.get(name)
        return error is not None and (error.version, error.stamp) == (version, stamp)

    async def pin(self, name: str, version: str) -> LoadedModel:
        """Serve `version` (loaded) until `unpin`, whatever newer versions arrive."""
        if version not in self._models.get(name, {}):
            raise ModelNotFound(f"model {name!r} has no loaded version {version!r}")
        self._pins[name] = version
        self._promoted.setdefault(name, set()).add(version)  # a pin is an explicit promote
        await self._retire(await self._activate(self._models[name][version]))
        return self._active[name]

    async def unpin(self, name: str) -> LoadedModel:
        """Back to the newest promoted version (the oldest loaded while none is)."""
        self._pins.pop(name, None)
        if name not in self._active:
            raise ModelNotFound(f"no model named {name!r}")
        newest = self._models[name][max(self._models[name], key=version_key)]
        await self._retire(await self._activate(newest))
        return self._active[name]

    async def release_unheld(self, name: str) -> None:
        """Retire the versions of `name` that only a shadow or canary kept loaded (once `held` no longer names them)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            active = self._active.get(name)
            retired = [] if active is None else self._beyond_keep(name, active.version)
        await self._retire(retired)

    def _beyond_keep(self, name: str, chosen: str) -> list[LoadedModel]:
        """Take out the versions outside the newest `keep_versions`, the chosen one and the held ones."""
        versions = self._models[name]
        keep = set(sorted(versions, key=version_key)[-self._keep :]) | {chosen}  # NOTE: never the pinned one
        keep |= self._held.get(name, set())
        return [versions.pop(v) for v in list(versions) if v not in keep]

    async def _retire(self, retired: list[LoadedModel]) -> None:
        for old in retired:
            await old.retire()
            self._emit(RegistryEvent("retired", old.name, old.version, old.fingerprint))
            log.info("model %s/%s released", old.name, old.version)

    async def _validate(self, loaded: LoadedModel) -> None:
        """A model must be servable: every feature it names resolves to something."""
        known = await self._catalogue() if self._catalogue is not None else None
        feast = loaded.spec.feast
        if isinstance(known, FromServingFeast):  # the Feast store: each model's own serving.feast
            known = feast.columns if feast is not None else frozenset()
            source = "user feature: no 'view:feature' of serving.feast fills it (FEATURE_STORE=feast)"
        else:
            source = "user feature"
        unknown = loaded.mapper.unresolved(known)
        if unknown:
            loaded.model.release()
            shown = ", ".join(unknown[:10]) + (f" (+{len(unknown) - 10} more)" if len(unknown) > 10 else "")
            raise ModelInvalid(f"features resolve to nothing (no event field, indicator or {source}): {shown}")
        if known is None and loaded.mapper.uses_user_features:
            log.warning(
                "%s/%s: the feature store does not publish its names; user features unchecked",
                loaded.name,
                loaded.version,
            )

    def _load(self, name: str, version: str, data: bytes, digest: str) -> LoadedModel:
        started = time.perf_counter()
        verdict = self._sandbox.trial(data) if self._sandbox is not None else None
        model = OnnxModel.load(data, self._ort, self._vetting)
        model.warm(self._policy.max_size)
        loaded = LoadedModel(
            name,
            version,
            model,
            self._policy,
            inline=self._ort.inline,
            predictions=self._predictions,
            fingerprint=digest,
            on_over_budget=self._over_budget,
        )
        loaded.load_s = time.perf_counter() - started
        if verdict is not None:
            loaded.trial_s, loaded.max_score = verdict.seconds, verdict.max_score
        return loaded

    async def _activate(self, loaded: LoadedModel) -> list[LoadedModel]:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            name = loaded.name
            versions = self._models.setdefault(name, {})
            replaced = versions.get(loaded.version)
            versions[loaded.version] = loaded
            previous = self._active.get(name)
            chosen = self._chosen(name, versions)
            self._active[name] = versions[chosen]
            retired = self._beyond_keep(name, chosen)
        if replaced is not None and replaced is not loaded:
            retired.append(replaced)
        active = self._active[name]
        log.info(
            "model %s/%s loaded in %.1f ms (sandbox trial %.1f ms) on %s; active %s/%s",
            name,
            loaded.version,
            loaded.load_s * 1000,
            loaded.trial_s * 1000,
            loaded.model.providers[0],
            name,
            active.version,
        )
        if active is not previous:
            self._emit(RegistryEvent("activated", name, active.version, active.fingerprint))
        return retired

    def _chosen(self, name: str, versions: dict[str, LoadedModel]) -> str:
        """The pinned version, else the newest promoted one, else the oldest loaded (never a newer candidate)."""
        pinned = self._pins.get(name)
        if pinned in versions:
            return pinned
        promoted = self._promoted.get(name, set()) & versions.keys()
        return max(promoted, key=version_key) if promoted else min(versions, key=version_key)

    def _emit(self, event: RegistryEvent) -> None:
        for hook in self._hooks[event.kind]:
            try:
                hook(event)
            except Exception:  # NOTE: a subscriber's bug must not undo a model swap
                log.exception("registry hook failed on %s %s/%s", event.kind, event.name, event.version)

    def active(self, name: str, version: str | None = None) -> LoadedModel:
        """The version that serves `name` now, or the loaded `version` when one is named."""
        try:
            return self._active[name] if version is None else self._models[name][version]
        except KeyError:
            if not self.ready:
                raise NotReady("models are still loading") from None
            if name not in self._active and self.quarantined(name):
                raise NotReady(f"every loaded version of {name!r} is quarantined") from None
            if version is not None and name in self._models:
                raise ModelNotFound(f"model {name!r} has no loaded version {version!r}") from None
            raise ModelNotFound(f"no model named {name!r}") from None

    def names(self) -> list[str]:
        """The names that have an active version."""
        return sorted(self._active)

    def loaded_versions(self, name: str) -> list[str]:
        return sorted(self._models.get(name, {}), key=version_key)

    def describe(self) -> list[ModelView]:
        """Each model as it serves now (`/api/models`)."""
        return [
            ModelView(
                name,
                active.version,
                self.loaded_versions(name),
                active.model.providers,
                active.loaded_at,
                self._pins.get(name),
                self._last_error.get(name),
                [m.describe() for m in self._models[name].values()],
            )
            for name, active in sorted(self._active.items())
        ]

    async def aclose(self) -> None:
        for versions in self._models.values():
            for loaded in versions.values():
                await loaded.retire()
        self._models.clear()
        self._active.clear()


def _not_vouched(ref: ModelRef, sha256: str, vouched: str) -> str:
    return (
        f"{ref.name}/{ref.version}: the file's sha256 {sha256[:12]}… is not the digest the fleet's records name "
        f"({vouched[:12]}…): the file changed after it was pinned or announced; not served here"
    )
