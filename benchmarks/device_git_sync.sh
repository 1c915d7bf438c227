# Sourced by the device scripts: the device tool's copy of .git can be stale (C00 then counts
# this session's committed files as modified, and gate JSONs record an old commit). Make a
# bundle here first, `git bundle create .gitbundle/repo.bundle main --tags` (.gitbundle/ is
# git-ignored; name it in the call's carry); this moves the copy's HEAD and index to it,
# leaving the working tree as it came.
if [ -f .gitbundle/repo.bundle ]; then
    git fetch -q .gitbundle/repo.bundle main && git reset -q FETCH_HEAD &&
        git fetch -q -f .gitbundle/repo.bundle 'refs/tags/*:refs/tags/*' || echo "git sync from the bundle failed"
fi
