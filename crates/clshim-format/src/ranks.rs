//! Which MPI rank a process is, from the variables launchers set: the library names trace
//! files and records by it, and `clshim run` asks it so that only one rank of a job warns
//! about what every rank would see alike.

/// Rank variables and the size variable that goes with each, most specific first.
/// MPI_LOCALRANKID (mpich/mvapich) is the node-local rank: used only when nothing else is set.
pub const RANK_VARS: [(&str, &str); 9] = [
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMIX_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"),
    ("PALS_RANKID", "PALS_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
    ("FLUX_TASK_RANK", "FLUX_JOB_SIZE"),
    ("ALPS_APP_PE", "ALPS_APP_SIZE"),
    ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
];

/// The MPI rank, size and the variable the rank came from, through `get`.
pub fn detect_rank(
    get: impl Fn(&str) -> Option<String>,
) -> (Option<u64>, Option<u64>, Option<&'static str>) {
    let num = |name: &str| get(name).and_then(|v| v.trim().parse::<u64>().ok());
    for (rank_var, size_var) in RANK_VARS {
        if let Some(rank) = num(rank_var) {
            return (Some(rank), num(size_var), Some(rank_var));
        }
    }
    (None, None, None)
}
