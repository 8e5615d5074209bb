"""Site profiles: what a machine is made of and how jobs reach it (data only)."""

from hpcdl.sites.schema import Gpu, Nic, NodeKind, Site
from hpcdl.sites.registry import list_sites, load_site, site_search_path

__all__ = ["Gpu", "Nic", "NodeKind", "Site", "list_sites", "load_site", "site_search_path"]
