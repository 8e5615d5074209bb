"""A site's paths named by project ({project}), filled with the account a job is charged to."""

from __future__ import annotations

from hpcdl.errors import HpcdlError
from hpcdl.shell import plain_word
from hpcdl.sites.schema import PROJECT_PLACEHOLDER, Site


def with_project(site: Site, account: str | None, scheduler: str | None = None,
                 account_suffix: str | None = None) -> Site:
    """The site with {project} in its paths replaced by the project the job is charged to.

    Centres name project folders by project id (OLCF: /lustre/orion/[projid]/scratch/$USER) and set
    no variable for it, so the id comes from the job's account, given at render time; without
    one, a Slurm job takes the account Slurm charged, which it sets in $SLURM_JOB_ACCOUNT (sbatch).
    Where the node kind's account is the project plus `account_suffix` (NCSA DeltaAI charges
    "abcd-dtai-gh" and keeps the project's files in /work/hdd/abcd), the folder is the project:
    the suffix comes off the account given, and off $SLURM_JOB_ACCOUNT in the job
    (${SLURM_JOB_ACCOUNT%-dtai-gh}, the shell's own suffix removal).
    """
    fs = site.filesystems
    holders = [f for f in ("scratch", "node_local") if PROJECT_PLACEHOLDER in (getattr(fs, f) or "")]
    if not holders:
        return site
    scheduler = scheduler or site.scheduler
    if not account and scheduler == "slurm":
        account = f"${{SLURM_JOB_ACCOUNT%{account_suffix}}}" if account_suffix else "${SLURM_JOB_ACCOUNT}"
    elif not account:
        raise HpcdlError(
            f"account: site {site.name!r} names its filesystems.{holders[0]} by project "
            f"({getattr(fs, holders[0])}); give the project with --account"
        )
    else:
        plain_word("account", "path", account)
        if "/" in account or account in (".", ".."):
            raise HpcdlError(f"account: {account!r} cannot name a folder")
        if account_suffix and account.endswith(account_suffix) and account != account_suffix:
            account = account[:-len(account_suffix)]
    update = {f: getattr(fs, f).replace(PROJECT_PLACEHOLDER, account) for f in holders}
    return site.model_copy(update={"filesystems": fs.model_copy(update=update)})
